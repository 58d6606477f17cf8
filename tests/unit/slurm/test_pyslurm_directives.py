"""The pyslurm backend reads a rendered script's #SBATCH lines as sbatch does."""

import pytest

from acbslurm.errors import ConfigError
from acbslurm.render import render
from acbslurm.slurm.pyslurm_backend import sbatch_directives
from acbslurm.spec import parse_spec


def test_a_rendered_spec_maps_to_pyslurm_attributes() -> None:
    spec = parse_spec(
        'name: "my job #1"\npartition: p1\naccount: a\ncpus_per_task: 2\nmem: 2G\n'
        "gpus: 1\ntime: '10:00'\noutput: /tmp/o-%j\ncommand: [sleep, '1']\n",
        "t.yaml",
    )
    attrs = sbatch_directives(render(spec, acbslurm="acbslurm"))
    assert attrs["name"] == "my job #1"
    assert attrs["partitions"] == "p1" and attrs["account"] == "a"
    assert attrs["cpus_per_task"] == 2 and attrs["memory_per_node"] == "2G"
    assert attrs["gres_per_node"] == "gpu:1" and attrs["standard_output"] == "/tmp/o-%j"


def test_only_the_header_counts_and_unknown_options_are_refused() -> None:
    script = "#!/bin/bash\n#SBATCH --job-name=a\n\necho hi\n#SBATCH --partition=late\n"
    assert sbatch_directives(script) == {"name": "a"}
    with pytest.raises(ConfigError, match="does not read '#SBATCH --exclusive'"):
        sbatch_directives("#!/bin/bash\n#SBATCH --exclusive=user\n")
