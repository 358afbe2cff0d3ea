"""The launch options of istar-grid and istar-run -m (launcher=, slurm=PROFILE, slurm.*, local.*) and the packaged
SLURM profiles; a bad option names the value and the choices."""
import pytest

from istar_plugin.launch.options import LaunchError, available_profiles, load_profile, parse


def test_launch_options_and_profiles():
    assert available_profiles() == ["gpu_a100", "local"]
    a100 = load_profile("gpu_a100")
    assert (a100.tasks, a100.gpus_per_node, a100.setup[0]) == (4, 4, "module load cuda/12.1")
    options, rest = parse(["launcher=inline", "seed=1"])
    assert (options.launcher, options.slurm, rest) == ("inline", None, ["seed=1"])
    assert parse(["local.parallelism=3"])[0].local.parallelism == 3


@pytest.mark.parametrize("arguments, message", [
    (["launcher=cloud"], "launcher 'cloud' unknown; choose one of: inline, local, slurm"),
    (["slurm=nope"], "unknown SLURM profile 'nope'; available: gpu_a100, local"),
    (["slurm=local", "slurm.gpus=1"], "bad field 'gpus'.*fields: partition, account"),
    (["slurm=local", "slurm.time_min=0"], "slurm.time_min must be >= 1, got 0"),
    (["launcher=slurm"], "launcher=slurm needs slurm=PROFILE; profiles: gpu_a100, local"),
    (["launcher=local", "slurm=local"], "slurm= and slurm.\\* options need launcher=slurm, not launcher=local"),
    (["local.parallelism=0"], "local.parallelism must be >= 1, got 0"),
])
def test_bad_launch_options_name_the_value_and_the_choices(arguments, message):
    with pytest.raises(LaunchError, match=message):
        parse(arguments)
