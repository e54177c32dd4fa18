"""ResNet parameter, FLOP and activation counts derived layer by layer (no torch needed).

Architecture: He et al. 2016, "Deep Residual Learning for Image Recognition", Table 1 (BasicBlock
for 18/34, Bottleneck for 50/101/152), as built by torchvision.models.resnet (stride on the 3x3 conv of
a Bottleneck, "ResNet v1.5"). The CIFAR variant (He et al. 2016 sec. 4.2 style stem, as in the widely
used kuangliu/pytorch-cifar ResNet18) replaces the 7x7/2 conv + 3x3/2 max-pool stem by one 3x3/1 conv.

Counting conventions:
- params: conv weights (no conv bias), BatchNorm weight+bias, fc weight+bias (torchvision's count).
- MACs: multiply-accumulates of convs and fc; torchvision's "GFLOPS" column and timm's "GMACs" are
  this number (4.09 for ResNet-50 at 224). One MAC = 2 FLOPs, the convention of the 6·N rule.
- training FLOPs = 3 × forward FLOPs (backward ≈ 2× forward: input and weight gradients).
- activation elements: what autograd keeps for backward, approximated as 2 tensors of each conv's output
  size (conv output saved by BatchNorm, BatchNorm/ReLU output saved by ReLU and the next conv) plus one
  per block output (post-add ReLU), plus the input image; BN/ReLU/add are the tensors that dominate.
"""
from __future__ import annotations

from dataclasses import dataclass

_BLOCKS = {18: ("basic", (2, 2, 2, 2)), 34: ("basic", (3, 4, 6, 3)),
           50: ("bottleneck", (3, 4, 6, 3)), 101: ("bottleneck", (3, 4, 23, 3)),
           152: ("bottleneck", (3, 8, 36, 3))}


@dataclass(frozen=True)
class ConvNetCounts:
    """Counts for one sample through a ResNet."""

    params: int
    forward_macs: int
    activation_elements: int

    @property
    def forward_flops(self) -> float:
        """Forward FLOPs per sample (2 FLOPs per multiply-accumulate)."""
        return 2.0 * self.forward_macs

    @property
    def training_flops(self) -> float:
        """Forward + backward FLOPs per sample (3 × forward)."""
        return 3.0 * self.forward_flops


class _Counter:
    """Accumulates params, MACs and saved activation elements while walking the network."""

    def __init__(self) -> None:
        self.params = 0
        self.macs = 0
        self.act = 0

    def conv(self, cin: int, cout: int, k: int, stride: int, hw: int) -> int:
        """A conv (no bias) + BatchNorm at spatial size hw; returns the output size."""
        out = (hw + stride - 1) // stride  # 'same' padding (k//2), as in torchvision
        self.params += cin * cout * k * k + 2 * cout
        self.macs += out * out * cout * cin * k * k
        self.act += 2 * out * out * cout
        return out


def resnet_counts(depth: int = 18, *, image_size: int = 224, num_classes: int = 1000,
                  stem: str = "imagenet") -> ConvNetCounts:
    """Params, forward MACs and saved activation elements per sample of a ResNet-`depth`."""
    if depth not in _BLOCKS:
        raise ValueError(f"ResNet depth {depth} is not one of {sorted(_BLOCKS)}")
    if stem not in ("imagenet", "cifar"):
        raise ValueError(f"ResNet stem '{stem}' must be 'imagenet' or 'cifar'")
    block, layers = _BLOCKS[depth]
    c = _Counter()
    c.act += 3 * image_size * image_size
    if stem == "imagenet":
        hw = c.conv(3, 64, 7, 2, image_size)
        hw = (hw + 1) // 2  # 3x3/2 max-pool
        c.act += hw * hw * 64
    else:
        hw = c.conv(3, 64, 3, 1, image_size)
    cin = 64
    expansion = 1 if block == "basic" else 4
    for stage, n_blocks in enumerate(layers):
        width = 64 * 2 ** stage
        for i in range(n_blocks):
            stride = 2 if (stage > 0 and i == 0) else 1
            cout = width * expansion
            if block == "basic":
                out = c.conv(cin, width, 3, stride, hw)
                c.conv(width, width, 3, 1, out)
            else:
                c.conv(cin, width, 1, 1, hw)
                out = c.conv(width, width, 3, stride, hw)
                c.conv(width, cout, 1, 1, out)
            if stride != 1 or cin != cout:
                c.conv(cin, cout, 1, stride, hw)  # projection shortcut
            c.act += out * out * cout
            hw, cin = out, cout
    c.params += cin * num_classes + num_classes
    c.macs += cin * num_classes
    return ConvNetCounts(params=c.params, forward_macs=c.macs, activation_elements=c.act)
