"""ResNet-18 for CIFAR-10-shaped 32x32 images (He et al. 2016, §4.2 CIFAR variant: 3x3 stem, no max-pool).

Used with the single, DDP and ZeRO strategies (seed 000's ResNet-18 DP experiments). BatchNorm
statistics are per rank, as in ordinary DDP training, so unlike the GPT its loss under DP is not
bit-for-bit the single-device loss.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    """Two 3x3 convs with BatchNorm and an identity (or 1x1 projection) shortcut."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.short(x))


class ResNet18(nn.Module):
    """[2, 2, 2, 2] basic blocks, widths 64-128-256-512, global average pool, linear classifier."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def build_resnet18(seed: int, num_classes: int = 10) -> ResNet18:
    """Build from `seed` on CPU so every rank starts from identical weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ResNet18(num_classes)
