"""`interp.metrics.mean_loss`, the training loss, against `per_example_loss(...).mean()`."""

from __future__ import annotations

import pytest
import torch

from interp.metrics import mean_loss, per_example_loss


@pytest.mark.parametrize("loss", ["mse", "cross_entropy"])
def test_mean_loss_and_its_gradient_equal_the_mean_of_the_per_example_losses(loss):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(300, 13, generator=gen, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 13, (300,), generator=gen)
    fused = mean_loss(logits, labels, loss)
    reference = per_example_loss(logits, labels, loss).mean()
    (grad_fused,) = torch.autograd.grad(fused, logits)
    (grad_reference,) = torch.autograd.grad(reference, logits)
    torch.testing.assert_close(fused, reference, rtol=1e-12, atol=0)
    torch.testing.assert_close(grad_fused, grad_reference, rtol=1e-12, atol=1e-15)


def test_an_unknown_loss_is_refused():
    with pytest.raises(ValueError, match="unknown loss 'l1'"):
        mean_loss(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), "l1")
