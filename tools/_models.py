"""Built-in example models of ``tools/coverage.py`` (torchvision is not importable next to the
CPU torch here, see issue 14): ``module:function`` targets that build an ``nn.Module`` with random
weights.

- :func:`resnet18`: the ResNet-18 architecture (He et al. 2016, torchvision's ``resnet18``
  layout): a 7x7/2 stem convolution, batch norm, ReLU, 3x3/2 max pooling, four stages of two
  BasicBlocks (3x3 convolutions with batch norm, a 1x1/2 projection with batch norm where the
  shape changes), adaptive average pooling to 1x1 and a linear classifier; ``width`` is the first
  stage's channel count (64 in ResNet-18; 16 by default here to keep the simulator's run short).
- :func:`mobilenet_v3_like`: MobileNetV3's building blocks (Howard et al. 2019): a 3x3/2 stem with
  batch norm and hardswish, inverted residual blocks (1x1 expansion, 3x3 depthwise convolution,
  squeeze-and-excitation with ReLU and hardsigmoid, 1x1 projection, residual where the shape
  allows), adaptive average pooling, a hardswish classifier with dropout.
- :func:`vgg_like`: VGG's layout (Simonyan and Zisserman 2015): stages of 3x3 convolutions with
  ReLU and 2x2 max pooling, a classifier of linear layers with ReLU and dropout.
- :func:`transformer_encoder`: token embedding, two ``nn.TransformerEncoderLayer`` (PyTorch's own,
  batch first, GELU), mean pooling over the sequence and a linear head; ``[N, S]`` token ids.
- :func:`embedding_lstm`: token embedding, a 2-layer ``nn.LSTM`` (batch first) and a linear head
  on the last step; ``[N, S]`` token ids.
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["resnet18", "BasicBlock", "ResNet", "mobilenet_v3_like", "vgg_like", "transformer_encoder", "embedding_lstm"]


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a residual connection (projected by a 1x1
    convolution with batch norm when the stride or the channel count changes)."""

    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + idt)


class ResNet(nn.Module):
    def __init__(self, layers=(2, 2, 2, 2), width=64, num_classes=1000, in_channels=3):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, cin = [], width
        for i, n in enumerate(layers):
            cout = width * 2 ** i
            blocks = [BasicBlock(cin, cout, 1 if i == 0 else 2)] + [BasicBlock(cout, cout) for _ in range(n - 1)]
            stages.append(nn.Sequential(*blocks))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet18(width: int = 16, num_classes: int = 10) -> nn.Module:
    """ResNet-18 (``[2, 2, 2, 2]`` BasicBlocks) with ``width`` channels in the first stage and
    ``num_classes`` outputs, for ``[N, 3, H, W]`` images (H, W >= 32)."""
    return ResNet((2, 2, 2, 2), width, num_classes)


class _SqueezeExcite(nn.Module):
    def __init__(self, c, r=4):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc2 = nn.Conv2d(c, c // r, 1), nn.Conv2d(c // r, c, 1)

    def forward(self, x):
        s = torch.relu(self.fc1(self.pool(x)))
        return x * nn.functional.hardsigmoid(self.fc2(s))


class _InvertedResidual(nn.Module):
    def __init__(self, cin, cexp, cout, stride, se, act):
        super().__init__()
        a = nn.Hardswish if act == "hs" else nn.ReLU
        layers = [nn.Conv2d(cin, cexp, 1, bias=False), nn.BatchNorm2d(cexp), a(),
                  nn.Conv2d(cexp, cexp, 3, stride, 1, groups=cexp, bias=False), nn.BatchNorm2d(cexp), a()]
        if se:
            layers.append(_SqueezeExcite(cexp))
        layers += [nn.Conv2d(cexp, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return x + y if self.residual else y


def mobilenet_v3_like(num_classes: int = 10) -> nn.Module:
    """A small MobileNetV3-shaped CNN for ``[N, 3, H, W]`` images (H, W >= 16)."""
    cfg = ((16, 16, 16, 2, True, "re"), (16, 32, 24, 2, False, "re"), (24, 48, 24, 1, False, "hs"),
           (24, 64, 32, 2, True, "hs"))
    layers = [nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish()]
    layers += [_InvertedResidual(*c) for c in cfg]
    layers += [nn.Conv2d(32, 64, 1, bias=False), nn.BatchNorm2d(64), nn.Hardswish(), nn.AdaptiveAvgPool2d(1),
               nn.Flatten(), nn.Linear(64, 48), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(48, num_classes)]
    return nn.Sequential(*layers)


def vgg_like(num_classes: int = 10) -> nn.Module:
    """A small VGG-shaped CNN for ``[N, 3, 32, 32]`` images."""
    layers, cin = [], 3
    for cout, n in ((8, 1), (16, 2), (32, 2)):
        for _ in range(n):
            layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(inplace=True)]
            cin = cout
        layers.append(nn.MaxPool2d(2))
    layers += [nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(True), nn.Dropout(0.5), nn.Linear(64, num_classes)]
    return nn.Sequential(*layers)


class _TokenTransformer(nn.Module):
    def __init__(self, vocab, d, heads, layers, num_classes):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.1, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, num_classes)

    def forward(self, ids):
        return self.head(self.encoder(self.emb(ids)).mean(1))


def transformer_encoder(vocab: int = 128, d_model: int = 32, num_classes: int = 10) -> nn.Module:
    """Two ``nn.TransformerEncoderLayer`` over embedded ``[N, S]`` token ids in ``[0, vocab)``."""
    return _TokenTransformer(vocab, d_model, 2, 2, num_classes)


class _EmbeddingLSTM(nn.Module):
    def __init__(self, vocab, d, hidden, num_classes):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, ids):
        y, _ = self.lstm(self.emb(ids))
        return self.head(y[:, -1])


def embedding_lstm(vocab: int = 128, d: int = 16, hidden: int = 32, num_classes: int = 10) -> nn.Module:
    """Embedding, a 2-layer LSTM and a linear head on the last step, for ``[N, S]`` token ids."""
    return _EmbeddingLSTM(vocab, d, hidden, num_classes)
