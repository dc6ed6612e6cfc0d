"""Keras layers whose computation runs on canna's kernels: :class:`Dense` and :class:`Conv2D`.

Drop-in equivalents of ``keras.layers.Dense`` / ``keras.layers.Conv2D`` (Keras 3 with the
TensorFlow backend): the same constructor arguments, the same weights (names, shapes, layouts:
a ``[in, out]`` kernel, an HWIO convolution kernel), so weights copy between a canna layer and its
native twin with ``set_weights(other.get_weights())``. The forward and backward run through
:func:`canna_dl.tf.dense` / :func:`canna_dl.tf.conv2d` (and the canna activation when
``activation`` is one of ``"relu"``, ``"gelu"``, ``"silu"`` / ``"swish"``, ``"sigmoid"``,
``"tanh"``, ``"softmax"``, ``"log_softmax"``; any other Keras activation runs in TensorFlow)::

    import keras, canna_dl.tf
    model = keras.Sequential([keras.Input((64,)),
                              canna_dl.tf.keras.Dense(32, activation="relu"),
                              canna_dl.tf.keras.Dense(10)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=3)

The layers are registered Keras serializables (package ``"canna"``): ``get_config`` /
``from_config`` round-trip and ``model.save("m.keras")`` / ``keras.models.load_model`` work. They
set ``supports_jit = False``: canna's ops run as native ``CannaCall`` nodes (or ``tf.py_function``
nodes) inside ``model.fit``'s ``tf.function``, which XLA cannot compile.
"""
from __future__ import annotations

import keras
from keras import activations, constraints, initializers, regularizers

from . import _ops

__all__ = ["Dense", "Conv2D"]

#: activations that run on canna (the rest are Keras's own)
CANNA_ACTIVATIONS = {
    "relu": _ops.relu, "gelu": _ops.gelu, "silu": _ops.silu, "swish": _ops.silu, "sigmoid": _ops.sigmoid,
    "tanh": _ops.tanh, "softmax": _ops.softmax, "log_softmax": _ops.log_softmax,
}


def _activation(activation):
    """(serializable form, callable): canna's op for the names above, else ``keras.activations.get``."""
    if activation is None or activation == "linear":
        return None, None
    if isinstance(activation, str) and activation in CANNA_ACTIVATIONS:
        return activation, CANNA_ACTIVATIONS[activation]
    fn = activations.get(activation)
    return activations.serialize(fn), fn


class _CannaLayer(keras.layers.Layer):
    def __init__(self, activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                 bias_regularizer, kernel_constraint, bias_constraint, **kwargs):
        super().__init__(**kwargs)
        self._activation_config, self.activation = _activation(activation)
        if not isinstance(use_bias, bool):
            raise TypeError(f"{type(self).__name__}: use_bias must be a bool, not {type(use_bias).__name__}")
        self.use_bias = use_bias
        self.kernel_initializer = initializers.get(kernel_initializer)
        self.bias_initializer = initializers.get(bias_initializer)
        self.kernel_regularizer = regularizers.get(kernel_regularizer)
        self.bias_regularizer = regularizers.get(bias_regularizer)
        self.kernel_constraint = constraints.get(kernel_constraint)
        self.bias_constraint = constraints.get(bias_constraint)
        self.supports_jit = False

    def _add_params(self, kernel_shape, bias_shape):
        self.kernel = self.add_weight(name="kernel", shape=kernel_shape, initializer=self.kernel_initializer,
                                      regularizer=self.kernel_regularizer, constraint=self.kernel_constraint)
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(name="bias", shape=bias_shape, initializer=self.bias_initializer,
                                        regularizer=self.bias_regularizer, constraint=self.bias_constraint)

    def _activate(self, y):
        return y if self.activation is None else self.activation(y)

    def _base_config(self):
        config = super().get_config()
        config.update({
            "activation": self._activation_config,
            "use_bias": self.use_bias,
            "kernel_initializer": initializers.serialize(self.kernel_initializer),
            "bias_initializer": initializers.serialize(self.bias_initializer),
            "kernel_regularizer": regularizers.serialize(self.kernel_regularizer),
            "bias_regularizer": regularizers.serialize(self.bias_regularizer),
            "kernel_constraint": constraints.serialize(self.kernel_constraint),
            "bias_constraint": constraints.serialize(self.bias_constraint),
        })
        return config


def _positive_int(layer, name, v):
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{layer}: {name} must be a positive int, got {v!r}")
    return v


@keras.saving.register_keras_serializable(package="canna")
class Dense(_CannaLayer):
    """``activation(inputs @ kernel + bias)`` on canna (``keras.layers.Dense``'s arguments and
    weights: ``kernel`` ``[in, units]``, ``bias`` ``[units]``).

    Input ``[..., in]`` (at least 2-D), output ``[..., units]``.

    Raises:
        ValueError: ``units`` not a positive int; an input whose last dim differs from the built one.
    """

    def __init__(self, units, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, kernel_constraint=None,
                 bias_constraint=None, **kwargs):
        super().__init__(activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                         bias_regularizer, kernel_constraint, bias_constraint, **kwargs)
        self.units = _positive_int("Dense", "units", units)
        self.input_spec = keras.layers.InputSpec(min_ndim=2)

    def build(self, input_shape):
        nin = input_shape[-1]
        if nin is None:
            raise ValueError("Dense: the last dimension of the inputs must be known to build the layer")
        self._add_params((nin, self.units), (self.units,))
        self.input_spec = keras.layers.InputSpec(min_ndim=2, axes={-1: nin})

    def call(self, inputs):
        return self._activate(_ops.dense(inputs, self.kernel, self.bias))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)

    def get_config(self):
        config = self._base_config()
        config["units"] = self.units
        return config


def _pair(layer, name, v):
    if isinstance(v, int) and not isinstance(v, bool):
        v = (v, v)
    t = tuple(v)
    if len(t) != 2 or any(isinstance(e, bool) or not isinstance(e, int) or e < 1 for e in t):
        raise ValueError(f"{layer}: {name} must be a positive int or a pair of them, got {v!r}")
    return t


@keras.saving.register_keras_serializable(package="canna")
class Conv2D(_CannaLayer):
    """2-D convolution on canna (``keras.layers.Conv2D``'s arguments and weights: ``kernel``
    ``[kh, kw, in_channels / groups, filters]``, ``bias`` ``[filters]``).

    ``data_format``: ``"channels_last"`` (NHWC, the default from ``keras.config.image_data_format()``)
    or ``"channels_first"`` (NCHW, canna's native layout, which TensorFlow's own CPU convolution
    lacks). ``padding``: ``"valid"`` or ``"same"``. See :func:`canna_dl.tf.conv2d` for the layout
    copies the NHWC backward makes.
    """

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None, dilation_rate=(1, 1),
                 groups=1, activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", kernel_regularizer=None, bias_regularizer=None, kernel_constraint=None,
                 bias_constraint=None, **kwargs):
        super().__init__(activation, use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                         bias_regularizer, kernel_constraint, bias_constraint, **kwargs)
        self.filters = _positive_int("Conv2D", "filters", filters)
        self.kernel_size = _pair("Conv2D", "kernel_size", kernel_size)
        self.strides = _pair("Conv2D", "strides", strides)
        self.dilation_rate = _pair("Conv2D", "dilation_rate", dilation_rate)
        self.groups = _positive_int("Conv2D", "groups", groups)
        if self.filters % self.groups:
            raise ValueError(f"Conv2D: filters ({self.filters}) must be a multiple of groups ({self.groups})")
        p = str(padding).lower()
        if p not in ("valid", "same"):
            raise ValueError(f"Conv2D: padding must be 'valid' or 'same', not {padding!r}")
        self.padding = p
        df = data_format or keras.config.image_data_format()
        if df not in ("channels_last", "channels_first"):
            raise ValueError(f"Conv2D: data_format must be 'channels_last' or 'channels_first', not {data_format!r}")
        self.data_format = df
        self.input_spec = keras.layers.InputSpec(ndim=4)

    @property
    def _channel_axis(self):
        return -1 if self.data_format == "channels_last" else 1

    def build(self, input_shape):
        c = input_shape[self._channel_axis]
        if c is None:
            raise ValueError("Conv2D: the channel dimension of the inputs must be known to build the layer")
        if c % self.groups:
            raise ValueError(f"Conv2D: the inputs' {c} channels are not a multiple of groups ({self.groups})")
        self._add_params(self.kernel_size + (c // self.groups, self.filters), (self.filters,))
        self.input_spec = keras.layers.InputSpec(ndim=4, axes={self._channel_axis: c})

    def call(self, inputs):
        y = _ops.conv2d(inputs, self.kernel, self.strides, self.padding.upper(),
                        "NHWC" if self.data_format == "channels_last" else "NCHW", self.dilation_rate, bias=self.bias)
        return self._activate(y)

    def compute_output_shape(self, input_shape):
        def out(n, k, s, d):
            if n is None:
                return None
            if self.padding == "same":
                return -(-n // s)
            return (n - (k - 1) * d - 1) // s + 1
        if self.data_format == "channels_last":
            n, h, w, _ = input_shape
        else:
            n, _, h, w = input_shape
        oh = out(h, self.kernel_size[0], self.strides[0], self.dilation_rate[0])
        ow = out(w, self.kernel_size[1], self.strides[1], self.dilation_rate[1])
        return (n, oh, ow, self.filters) if self.data_format == "channels_last" else (n, self.filters, oh, ow)

    def get_config(self):
        config = self._base_config()
        config.update({"filters": self.filters, "kernel_size": self.kernel_size, "strides": self.strides,
                       "padding": self.padding, "data_format": self.data_format,
                       "dilation_rate": self.dilation_rate, "groups": self.groups})
        return config
