"""Job spec loading and validation: file:line messages, suggestions, units, overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from acbslurm.errors import SpecError
from acbslurm.spec import load_spec, parse_spec
from acbslurm.units import mem_megabytes, parse_time_limit, slurm_mem, time_limit_seconds

REPO = Path(__file__).resolve().parents[3]

MINIMAL = "name: t\ncontainer:\n  image: busybox:latest\n"


def errors_of(text: str, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(SpecError) as info:
        parse_spec(text, "job.yaml", overrides)
    return str(info.value)


def test_whisper_example_is_the_seed_job() -> None:
    spec = load_spec(REPO / "conf/examples/whisper.yaml")
    assert spec.partition == "p1"
    assert spec.account == "user1"
    assert spec.cpus_per_task == 2
    assert spec.mem == "2G"
    assert spec.gres == "gpu:1"
    assert spec.output == "openai-whisper.out"
    assert spec.error == "openai-whisper.err"
    assert spec.container is not None
    assert spec.container.image == "openai-whisper:latest"
    assert spec.container.mounts[0].as_arg() == "/home/user1:/home/user1"
    assert spec.container.command is not None
    assert spec.container.command[0] == "whisper"
    assert "/home/user1/Gmjrwl_D72E.wav" in spec.container.command


def test_sandbox_example_is_valid() -> None:
    spec = load_spec(REPO / "conf/examples/sandbox-gpu.yaml")
    assert spec.container is not None
    assert spec.container.image == "acbslurm/busybox:latest"
    assert spec.gpu_count == 1


def test_unknown_key_names_line_and_closest_key() -> None:
    msg = errors_of("name: t\nmemory: 2G\ncontainer:\n  image: x\n  comand: [a]\n")
    assert "job.yaml:2: memory: unknown key (did you mean 'mem'?)" in msg
    assert "job.yaml:5: container.comand: unknown key (did you mean 'command'?)" in msg


def test_unknown_key_without_close_match_lists_valid_keys() -> None:
    msg = errors_of(MINIMAL + "zzzzqq: 1\n")
    assert "zzzzqq: unknown key; valid keys: name, partition" in msg


def test_dashed_key_suggests_underscore_form() -> None:
    assert "did you mean 'cpus_per_task'" in errors_of(MINIMAL + "cpus-per-task: 2\n")


@pytest.mark.parametrize("gpus", ["0", "-1", "1.5", "abc", "true", "a100:0", ":2", "a b:1"])
def test_bad_gpu_counts(gpus: str) -> None:
    msg = errors_of(MINIMAL + f"gpus: {gpus}\n")
    assert "job.yaml:4: gpus:" in msg


@pytest.mark.parametrize(("gpus", "gres"), [(1, "gpu:1"), ("2", "gpu:2"), ("a100:2", "gpu:a100:2")])
def test_good_gpu_counts(gpus: object, gres: str) -> None:
    spec = parse_spec(MINIMAL + f"gpus: {gpus}\n", "job.yaml")
    assert spec.gres == gres


def test_missing_image() -> None:
    msg = errors_of("name: t\ncontainer:\n  command: [echo]\n")
    assert "job.yaml:2: container: missing required key 'image'" in msg


def test_nothing_to_run() -> None:
    assert "nothing to run" in errors_of("name: t\n")


def test_command_and_container_conflict() -> None:
    assert "remove 'command'" in errors_of(MINIMAL + "command: [echo]\n")


def test_all_errors_reported_at_once() -> None:
    msg = errors_of(MINIMAL + "mem: 2X\ntime: 1-25:00:00\nntasks: 0\n")
    assert "job.yaml:4: mem: '2X' is not a size" in msg
    assert "job.yaml:5: time:" in msg
    assert "job.yaml:6: ntasks: must be a positive integer" in msg


def test_newline_in_directive_value_refused() -> None:
    msg = errors_of('name: "a\\nb"\ncontainer:\n  image: x\n')
    assert "job.yaml:1: name: must be one line" in msg


def test_yaml_syntax_error_has_line() -> None:
    msg = errors_of("name: t\ncontainer: [\n")
    assert msg.startswith("job.yaml:") and "not valid YAML" in msg


def test_duplicate_key() -> None:
    assert "appears twice" in errors_of("name: a\nname: b\ncommand: x\n")


def test_spec_must_be_mapping() -> None:
    assert "must be a mapping" in errors_of("- a\n- b\n")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="does not exist"):
        load_spec(tmp_path / "nope.yaml")


def test_mounts_forms_and_errors() -> None:
    spec = parse_spec(
        "container:\n  image: x\n  mounts:\n    - /a:/b:ro\n    - {source: /c, target: /d}\n",
        "job.yaml",
    )
    assert spec.container is not None
    assert [m.as_arg() for m in spec.container.mounts] == ["/a:/b:ro", "/c:/d"]
    msg = errors_of("container:\n  image: x\n  mounts:\n    - rel:/b\n    - /a:/b:xx\n")
    assert "job.yaml:4: container.mounts.0: source 'rel' must be an absolute path" in msg
    assert "job.yaml:5: container.mounts.1:" in msg
    msg = errors_of("container:\n  image: x\n  mounts:\n    - /dev/nvidia1:/g\n    - //dev:/d\n")
    assert "job.yaml:4: container.mounts.0: source '/dev/nvidia1' is a device path" in msg
    assert "job.yaml:5: container.mounts.1: source '//dev' is a device path" in msg
    ok = parse_spec(
        "container:\n  image: x\n  mounts: [/devices:/d, /sys:/s:ro, /proc2:/p]\n", "job.yaml"
    )
    assert ok.container is not None
    assert [m.source for m in ok.container.mounts] == ["/devices", "/sys", "/proc2"]


def test_each_mount_keeps_where_it_was_set() -> None:
    ok = parse_spec(
        "container:\n  image: x\n  mounts:\n    - /a:/b:ro\n    - {source: /c, target: /d}\n",
        "job.yaml",
    )
    assert ok.container is not None
    assert ok.container.mount_wheres == (
        "job.yaml:4: container.mounts.0",
        "job.yaml:5: container.mounts.1",
    )


def test_a_command_or_variable_no_exec_takes_is_refused_with_its_line() -> None:
    """Over Linux's MAX_ARG_STRLEN (128 KiB, its NUL included) one argument or
    environment string fails every exec on the node (E2BIG, exit 126) after the job
    waited in the queue: refused here, with file:line; one byte less passes."""
    from acbslurm.spec.checks import MAX_ARG_STRLEN

    most = "x" * (MAX_ARG_STRLEN - 1)
    assert parse_spec(f"command: {most}\n", "job.yaml").command == most
    msg = errors_of(f"name: t\ncommand: x{most}\n")
    assert f"job.yaml:2: command: is {MAX_ARG_STRLEN} bytes, over Linux's 131071" in msg
    assert "(exit 126, Argument list too long); put it in a file the job runs" in msg
    msg = errors_of(f"container:\n  image: x\n  command: [sh, -c, 'x{most}']\n")
    assert "job.yaml:3: container.command.2: is 131072 bytes" in msg, msg
    msg = errors_of(f"command: x\nenv:\n  BIG: {most}\n")
    assert "job.yaml:3: env.BIG: is, with its name, 131075 bytes" in msg, msg


def test_mounts_refuse_the_root_and_proc_by_name() -> None:
    lines = ["/:/host", "//:/h", "/./:/h", "/tmp/..:/h", "/dev/../dev:/h", "/proc/1/root:/h"]
    text = "container:\n  image: x\n  mounts:\n" + "".join(f"    - {m}\n" for m in lines)
    msg = errors_of(text)
    root = "is the root directory, which contains /dev (a bind mount is recursive"
    for i, src in enumerate(["/", "//", "/./", "/tmp/.."]):
        assert f"job.yaml:{4 + i}: container.mounts.{i}: source '{src}' {root}" in msg
    assert "job.yaml:8: container.mounts.4: source '/dev/../dev' is a device path" in msg
    assert "job.yaml:9: container.mounts.5: source '/proc/1/root' is under /proc" in msg


def test_env_names_checked_values_kept() -> None:
    spec = parse_spec(MINIMAL + "env:\n  A: 1\n  B: true\n  C: 'x y'\n", "job.yaml")
    assert spec.env == (("A", "1"), ("B", "true"), ("C", "x y"))
    assert "env.1X: is not a valid variable name" in errors_of(MINIMAL + "env:\n  1X: a\n")


def test_overrides_dotted_and_typed() -> None:
    spec = parse_spec(
        MINIMAL,
        "job.yaml",
        [
            "container.image=other:2",
            "gpus=2",
            "container.command=[sh, -c, 'echo a b']",
            "env.K=v=w",
        ],
    )
    assert spec.container is not None
    assert spec.container.image == "other:2"
    assert spec.gpus == "2"
    assert spec.container.command == ("sh", "-c", "echo a b")
    assert spec.env == (("K", "v=w"),)


def test_override_errors_name_the_flag() -> None:
    msg = errors_of(MINIMAL, ("container.imag=x",))
    assert "--set container.imag: container.imag: unknown key (did you mean 'image'?)" in msg
    assert "--set mem: mem:" in errors_of(MINIMAL, ("mem=lots",))
    with pytest.raises(SpecError, match="expected KEY=VALUE"):
        parse_spec(MINIMAL, "job.yaml", ["novalue"])
    with pytest.raises(SpecError, match="is not a mapping"):
        parse_spec(MINIMAL, "job.yaml", ["name.x=1"])


def test_override_text_with_colon_stays_text() -> None:
    spec = parse_spec(MINIMAL, "job.yaml", ["name=a: b"])
    assert spec.name == "a: b"


@pytest.mark.parametrize(
    ("raw", "norm", "mb"),
    [
        ("2G", "2G", 2048),
        ("500m", "500M", 500),
        (1024, "1024", 1024),
        ("1T", "1T", 1048576),
        ("2GB", "2G", 2048),
    ],
)
def test_mem_units(raw: object, norm: str, mb: float) -> None:
    assert slurm_mem(raw) == norm
    assert mem_megabytes(norm) == mb


@pytest.mark.parametrize("raw", ["2X", "G", "-1G", "0", "1.5G", "", True])
def test_bad_mem(raw: object) -> None:
    with pytest.raises(ValueError):
        slurm_mem(raw)


@pytest.mark.parametrize(
    ("raw", "secs"),
    [
        ("30", 1800),
        ("5:30", 330),
        ("2:00:00", 7200),
        ("1-00:00:00", 86400),
        ("1-2", 93600),
        ("1-02:30", 95400),
        ("UNLIMITED", 0),
        ("infinite", 0),
    ],
)
def test_time_units(raw: str, secs: int) -> None:
    assert time_limit_seconds(parse_time_limit(raw)) == secs


@pytest.mark.parametrize("raw", ["1:60", "1-24:00:00", "abc", "1:2:3:4", "0", "", "-5", "2:61:00"])
def test_bad_time(raw: str) -> None:
    with pytest.raises(ValueError):
        parse_time_limit(raw)


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("ntasks: '²'\ncommand: [x]\n", "ntasks"),
        ("cpus_per_task: '٣'\ncommand: [x]\n", "cpus_per_task"),
        ("gpus: '²'\ncommand: [x]\n", "gpus"),
        ("gpus: 'a100:٢'\ncommand: [x]\n", "gpus"),
        ("time: '\u0662:\u0660\u0660'\ncommand: [x]\n", "time"),
        ("mem: '٢G'\ncommand: [x]\n", "mem"),
    ],
)
def test_only_ascii_digits_count(text: str, key: str) -> None:
    # Before: "²".isdigit() is True and int("²") raises (a traceback); "\d" matched
    # Arabic-Indic digits, so time "\u0662:\u0660\u0660" reached an #SBATCH line.
    with pytest.raises(SpecError, match=rf"spec.yaml:1: {key}: "):
        parse_spec(text, "spec.yaml")


def test_set_with_a_non_ascii_digit_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"--set gpus: gpus: '²' is not"):
        parse_spec("command: [x]\n", "spec.yaml", ["gpus=²"])


def test_nested_aliases_are_refused_quickly() -> None:
    # 9 levels of 10 aliases each would expand to 10**9 values.
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        refs = ", ".join([f"*a{i - 1}"] * 10)
        lines.append(f"a{i}: &a{i} [{refs}]")
    text = "\n".join(lines) + "\ncommand: [x]\n"
    with pytest.raises(SpecError, match="expands to more than 10000 values"):
        parse_spec(text, "bomb.yaml")


def test_a_few_aliases_are_fine() -> None:
    spec = parse_spec("env: &e {A: '1'}\ncontainer: {image: busybox, env: *e}\n", "ok.yaml")
    assert spec.env == (("A", "1"),) and spec.container is not None
    assert spec.container.env == (("A", "1"),)


def test_spec_env_may_not_choose_gpus() -> None:
    text = "container:\n  image: busybox\n  env:\n    NVIDIA_VISIBLE_DEVICES: all\n"
    with pytest.raises(SpecError, match=r"s.yaml:4: container.env.NVIDIA_VISIBLE_DEVICES: .*"):
        parse_spec(text, "s.yaml")


SBATCH_KEYS = """\
qos: high
constraint: "a100&nvlink"
reservation: maint window
exclusive: true
mail_type: [END, fail]
mail_user: user1@example.org
signal: "B:USR1@120"
requeue: false
sbatch_args:
  - --licenses=matlab:1
  - --comment=it's "mine"
  - --hold
"""


def test_common_sbatch_options_are_spec_keys() -> None:
    spec = parse_spec(MINIMAL + SBATCH_KEYS, "job.yaml")
    assert spec.qos == "high"
    assert spec.constraint == "a100&nvlink"
    assert spec.reservation == "maint window"
    assert spec.exclusive == ""  # --exclusive without a value
    assert spec.mail_type == "END,FAIL"
    assert spec.mail_user == "user1@example.org"
    assert spec.signal == "B:USR1@120"
    assert spec.requeue is False
    assert spec.sbatch_args == ("--licenses=matlab:1", '--comment=it\'s "mine"', "--hold")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("exclusive: maybe", "exclusive: must be true, false, user, mcs or topo"),
        ("mail_type: [END, SOMETIMES]", "mail_type: unknown mail type 'SOMETIMES'"),
        ("signal: 'USR1@soon'", "signal: 'USR1@soon' is not [R:|B:]SIGNAL[@SECONDS]"),
        ("requeue: sometimes", "requeue: must be true or false"),
        ("sbatch_args: --hold", "sbatch_args: must be a list"),
        (
            "sbatch_args: [hold]",
            "sbatch_args.0: 'hold' is not a long option (--name or --name=value)",
        ),
        ("sbatch_args: ['--partition=p2']", "use the spec key 'partition'"),
        ("sbatch_args: ['--wrap=hostname']", "--wrap cannot be passed"),
        ('sbatch_args: ["--x=a\\nb"]', "one line"),
    ],
)
def test_bad_sbatch_options_are_named(line: str, message: str) -> None:
    assert message in errors_of(MINIMAL + line + "\n")


@pytest.mark.parametrize("value", ["missing", "always", "never"])
def test_container_pull_policy(value: str) -> None:
    spec = parse_spec(MINIMAL + f"  pull: {value}\n", "job.yaml")
    assert spec.container is not None
    assert spec.container.pull == value


def test_container_pull_policy_defaults_to_missing_and_is_checked() -> None:
    spec = parse_spec(MINIMAL, "job.yaml")
    assert spec.container is not None
    assert spec.container.pull == "missing"
    msg = errors_of(MINIMAL + "  pull: sometimes\n")
    assert "job.yaml:4: container.pull: must be missing, always or never" in msg


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("env:\n  ACBSLURM_JOB_ID: '7'\n", "job.yaml:2: env.ACBSLURM_JOB_ID"),
        (
            "container:\n  image: busybox\n  env:\n    ACBSLURM_GPU_UUIDS: GPU-x\n",
            "job.yaml:4: container.env.ACBSLURM_GPU_UUIDS",
        ),
    ],
)
def test_spec_env_may_not_set_acbslurm_variables(text: str, where: str) -> None:
    assert f"{where}: " in errors_of(text)
    assert "is refused: ACBSLURM_" in errors_of(text)


def test_a_jobs_own_env_may_carry_acbslurm_settings_but_a_container_may_not() -> None:
    """The job's environment is the user's (docs/serve.md's rendezvous host), a
    container's ACBSLURM_* is what its cleanup finds it by."""
    job_level = MINIMAL + "env:\n  ACBSLURM_SERVE_RENDEZVOUS_HOST: 10.0.0.1\n"
    assert dict(parse_spec(job_level, "job.yaml").env) == {
        "ACBSLURM_SERVE_RENDEZVOUS_HOST": "10.0.0.1"
    }
    msg = errors_of(MINIMAL + "  env:\n    ACBSLURM_SERVE_RENDEZVOUS_HOST: 10.0.0.1\n")
    assert "job.yaml:5: container.env.ACBSLURM_SERVE_RENDEZVOUS_HOST: " in msg


def test_set_env_may_not_set_acbslurm_variables() -> None:
    msg = errors_of(MINIMAL, ("container.env.ACBSLURM_JOB_ID=7",))
    assert "--set container.env.ACBSLURM_JOB_ID" in msg and "is refused: ACBSLURM_" in msg


def _alias_levels(levels: int) -> list[str]:
    """``&a0 [x]*9, &a1 [*a0]*9, ...``: 9**levels values once expanded."""
    out = ["&a0 [" + ", ".join(["x"] * 9) + "]"]
    out += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels)]
    return out


# A key that is a list or mapping was built in full (deep=True) outside the bound on
# values: a few hundred bytes of aliases there took a minute and gigabytes, then failed
# with a TypeError (a list is no dict key).
NON_SCALAR_KEYS = [
    ("? [a]\n: 1\ncommand: [x]\n", 1),
    ("? {k: v}\n: 1\ncommand: [x]\n", 1),
    ("command: [x]\n? [" + ", ".join(_alias_levels(5)) + "]\n: 1\n", 2),
    ("a: " + _alias_levels(1)[0] + "\n? *a0\n: 1\ncommand: [x]\n", 1),
]


@pytest.mark.parametrize(("text", "line"), NON_SCALAR_KEYS)
def test_a_key_must_be_a_plain_value(text: str, line: int) -> None:
    with pytest.raises(SpecError, match=rf"^job.yaml:{line}: a key must be a plain value"):
        parse_spec(text, "job.yaml")


def test_a_list_key_is_a_user_error_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from acbslurm.cli.main import main

    spec = tmp_path / "key.yaml"
    spec.write_text("? [" + ", ".join(_alias_levels(4)) + "]\n: 1\ncommand: [x]\n")
    with pytest.raises(SystemExit) as info:
        main(["render", str(spec)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"Error: {spec}:1: a key must be a plain value")
    assert "Traceback" not in err


def _alias_list(levels: int) -> str:
    return "[" + ", ".join(_alias_levels(levels)) + "]"


@pytest.mark.parametrize("key", ["name", "container.command", "env.A"])
def test_set_values_have_the_files_bound_on_aliases(key: str) -> None:
    # 288 bytes of aliases in a --set value once ran for minutes (the value was built,
    # then its repr of 9**9 items went into the message).
    msg = errors_of(MINIMAL, (f"{key}={_alias_list(9)}",))
    assert msg.startswith(f"--set {key}:1: the document expands to more than 10000 values")
    assert len(msg) < 500


def test_a_list_key_in_a_set_value_is_refused() -> None:
    assert "a key must be a plain value" in errors_of(MINIMAL, ("name={[a]: 1}",))


def test_set_cli_refuses_an_alias_bomb_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from acbslurm.cli.main import main

    spec = tmp_path / "ok.yaml"
    spec.write_text("command: [x]\n")
    with pytest.raises(SystemExit) as info:
        main(["render", str(spec), "--set", f"name={_alias_list(5)}"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: --set name:1: the document expands to more than 10000")
    assert len(err) < 500 and "Traceback" not in err


@pytest.mark.parametrize(
    "text",
    [
        "name: [" + ", ".join(["x"] * 9000) + "]\n",  # within the bound, 45 kB of repr
        'name: "' + "y" * 100_000 + '\\n"\n',  # a control character
        "name: ok\n? " + "z" * 100_000 + "\n: 1\n",  # a long unknown key
    ],
)
def test_a_message_quotes_at_most_a_few_hundred_characters_of_a_value(text: str) -> None:
    msg = errors_of(text)
    assert "job.yaml:" in msg
    assert all(len(line) < 500 for line in msg.splitlines()), [len(x) for x in msg.splitlines()]
    assert "characters left out" in msg


def test_a_document_that_is_no_mapping_is_quoted_short() -> None:
    msg = errors_of("[" + ", ".join(["x"] * 9000) + "]\n")
    assert "a job spec must be a mapping of keys" in msg and len(msg) < 500


@pytest.mark.parametrize("depth", [101, 500, 999])
def test_deep_nesting_is_refused_not_a_recursion_error(depth: int) -> None:
    # libyaml reads up to 1000 levels; building them here once hit Python's recursion limit.
    msg = errors_of("name: " + "[" * depth + "]" * depth + "\n")
    assert msg.startswith("job.yaml:1: the document nests more than 100 levels deep")


def test_a_hundred_levels_are_read() -> None:
    msg = errors_of("name: " + "[" * 99 + "]" * 99 + "\ncommand: [x]\n")
    assert "name: must be a string" in msg


@pytest.mark.parametrize(
    ("lines", "attr", "value"),
    [
        ("ntasks: 2\ngpus_per_task: 1\n", "gpus_per_task", "1"),
        ("ntasks_per_node: 2\ngpus_per_task: a100:1\n", "gpus_per_task", "a100:1"),
        ("gpus_total: 3\n", "gpus_total", "3"),
        ("gpus_total: h200:02\n", "gpus_total", "h200:2"),
    ],
)
def test_gpus_per_task_and_in_total(lines: str, attr: str, value: str) -> None:
    spec = parse_spec(MINIMAL + lines, "job.yaml")
    assert getattr(spec, attr) == value
    assert spec.gres is None


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (
            "gpus: 1\ngpus_total: 2\n",
            "job.yaml:5: gpus_total: a job asks for GPUs one way: 'gpus' or 'gpus_total'",
        ),
        (
            "ntasks: 2\ngpus_per_task: 1\ngpus_total: 2\n",
            "job.yaml:6: gpus_total: a job asks for GPUs one way: 'gpus_per_task' or",
        ),
        ("gpus_per_task: 1\n", "job.yaml:4: gpus_per_task: needs a task count"),
        ("ntasks: 2\ngpus_per_task: 0\n", "job.yaml:5: gpus_per_task: 0 is not a positive"),
        ("gpus_total: a:b\n", "job.yaml:4: gpus_total: 'a:b' is not"),
        ("sbatch_args: ['--gpus=1']", "--gpus: use the spec key 'gpus_total' instead"),
        ("sbatch_args: ['--gpus-per-task=1']", "use the spec key 'gpus_per_task'"),
        ("sbatch_args: ['--gpus-per-node=1']", "--gpus-per-node: use the spec key 'gpus'"),
    ],
)
def test_gpu_request_shapes_are_checked(lines: str, message: str) -> None:
    assert message in errors_of(MINIMAL + lines + "\n")


def test_base_60_numbers_stay_text() -> None:
    """YAML 1.1 reads ``1:30`` as 90 and ``1000:50`` as 60050; in a spec they are a
    Slurm time and a UID:GID, so they keep their text (quoted or not)."""
    spec = parse_spec(
        "command: [x]\ntime: 1:30\nenv: {A: 1:30, B: 190:20:30.5, C: 30, D: 1.5}\n", "job.yaml"
    )
    assert spec.time == "1:30"
    assert dict(spec.env) == {"A": "1:30", "B": "190:20:30.5", "C": "30", "D": "1.5"}
