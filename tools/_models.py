"""Built-in example models of ``tools/coverage.py`` (torchvision is not importable next to the
CPU torch here, see issue 14): ``module:function`` targets that build an ``nn.Module`` with random
weights.

- :func:`resnet18`: the ResNet-18 architecture (He et al. 2016, torchvision's ``resnet18``
  layout): a 7x7/2 stem convolution, batch norm, ReLU, 3x3/2 max pooling, four stages of two
  BasicBlocks (3x3 convolutions with batch norm, a 1x1/2 projection with batch norm where the
  shape changes), adaptive average pooling to 1x1 and a linear classifier; ``width`` is the first
  stage's channel count (64 in ResNet-18; 16 by default here to keep the simulator's run short).
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["resnet18", "BasicBlock", "ResNet"]


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
