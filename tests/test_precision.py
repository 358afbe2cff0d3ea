"""Mixed precision: what ``precision=auto`` picks, and every isotropy term computed in float32 under bf16 autocast.

Under ``torch.autocast(cpu, bfloat16)`` the encoder's products are bf16; the penalties must not be. Each term is
scored twice on the same points, once outside autocast and once inside it: the values and the gradients agree
to float32 rounding (rtol 1e-5), where a bf16 covariance would be off by about 1e-2.
"""
import pytest
import torch

from istar_plugin.criterions.cosreg import cosreg_loss, embedding_cosine
from istar_plugin.criterions.isolayer import isotropy_loss
from istar_plugin.criterions.istar import istar_loss
from istar_plugin.criterions.spectrum import spectrum_penalty, spectrum_targets
from istar_plugin.errors import ConfigError
from istar_plugin.isotropy import CovarianceAccumulator
from istar_plugin.runtime.precision import choose_precision, native_bf16, precision_line

CPU = torch.device("cpu")


def anisotropic_points(rows=96, dim=24, seed=0):
    generator = torch.Generator().manual_seed(seed)
    scale = torch.logspace(0, -2, dim)  # a spread of variances, as in a real cloud
    return (torch.randn(rows, dim, generator=generator) * scale + 3.0).requires_grad_(True)


PENALTIES = {
    "istar": lambda x: istar_loss(torch.tensor(0.0), [x[:50], x[50:]], torch.eye(x.shape[1]), 0.3, -1.0)[0],
    "cosreg": lambda x: cosreg_loss(torch.tensor(0.0), x, 1.0)[0],
    "embedding_cosine": embedding_cosine,
    "isolayer": lambda x: isotropy_loss(x)[0],
    "spectrum": lambda x: spectrum_penalty(x, spectrum_targets("polynomial", x.shape[1], 1.0, 0.0, 1.0))[0],
}


@pytest.mark.parametrize("name", sorted(PENALTIES))
def test_isotropy_terms_and_their_gradients_stay_float32_under_bf16_autocast(name):
    values, grads = [], []
    for enabled in (False, True):
        points = anisotropic_points()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled):
            value = PENALTIES[name](points)
        assert value.dtype == torch.float32
        value.backward()
        values.append(value.detach())
        grads.append(points.grad)
    torch.testing.assert_close(values[1], values[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-6)


def test_a_bf16_covariance_would_fail_the_tolerance_above():
    """The check above can fail: the same trace/Frobenius ratio computed from bf16 products is off by far more."""
    points = anisotropic_points().detach()
    centred = points - points.mean(0)
    exact, rounded = centred.T @ centred, (centred.bfloat16().T @ centred.bfloat16()).float()
    ratio = lambda cov: cov.trace() / cov.norm()  # noqa: E731
    assert not torch.allclose(ratio(rounded), ratio(exact), rtol=1e-5)


def test_sigma_s_accumulates_in_float64_from_bf16_points_under_autocast():
    points = anisotropic_points().detach()
    plain, autocast = CovarianceAccumulator(points.shape[1]), CovarianceAccumulator(points.shape[1])
    plain.update(points.bfloat16())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast.update(points.bfloat16())
    assert autocast.covariance().dtype == torch.float64
    torch.testing.assert_close(autocast.covariance(), plain.covariance(), rtol=1e-6, atol=1e-9)


def test_auto_is_bf16_where_the_cpu_computes_it_natively_and_explicit_choices_are_kept():
    assert choose_precision("auto", CPU) == ("bf16" if native_bf16(CPU) else "fp32")
    assert [choose_precision(p, CPU) for p in ("fp32", "bf16")] == ["fp32", "bf16"]
    with pytest.raises(ConfigError, match="precision=fp16 needs a GPU"):
        choose_precision("fp16", CPU)


def test_native_bf16_reads_the_cpu_flags():
    flags = open("/proc/cpuinfo").read().split() if __import__("os").path.exists("/proc/cpuinfo") else []
    if flags:  # Linux: torch's CPU capability check and the kernel's flags agree
        assert native_bf16(CPU) == ("avx512_bf16" in flags or "amx_bf16" in flags or "amx_tile" in flags)
    assert native_bf16(torch.device("meta")) is False


def test_the_precision_line_says_why_auto_chose():
    assert precision_line("fp32", "fp32", CPU) == "precision fp32"
    assert precision_line("auto", "bf16", CPU) == ("precision bf16 (auto: this cpu computes bf16 natively; "
                                                   "precision=fp32 for full precision)")
