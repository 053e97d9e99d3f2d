"""scripts/check_gpu.py, as far as a machine without a GPU can check it: its arguments,
the commands it would run, the wheel folder's contents, and its refusal without a GPU."""
from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_gpu.py"


@pytest.fixture
def check_gpu():
    spec = importlib.util.spec_from_file_location("check_gpu", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def no_subprocess(check_gpu, monkeypatch):
    """Fail the test if the script would start any command."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"the script ran a command: {args[0]}")
    monkeypatch.setattr(check_gpu.subprocess, "run", refuse)


def _dry_run_commands(output: str) -> list[list[str]]:
    """The printed command lines ('$ ...' or '[check] $ VAR=value ...'), split like a
    shell, without the environment settings in front."""
    commands = []
    for line in output.splitlines():
        if "$ " in line:
            words = shlex.split(line.split("$ ", 1)[1])
            while words and "=" in words[0] and not words[0].startswith("-"):
                words.pop(0)
            commands.append(words)
    return commands


# --------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["--python-version", "3.12"], "--python-version only goes with --download-wheels"),
    (["--download-wheels", "w", "--python-version", "3"], "must look like 3.12, got '3'"),
    (["--download-wheels", "w", "--python-version", "py3.12"], "must look like 3.12"),
    (["--download-wheels", "w", "--wheels", "w"], "give one of them"),
    (["--platform", "win_amd64"], "--platform only goes with --download-wheels"),
    (["--wheels", "no/such/folder"], "no folder of wheels there"),
    (["--only", "everything"], "invalid choice: 'everything'"),
])
def test_bad_arguments_exit_2_with_a_message(check_gpu, no_subprocess, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        check_gpu.main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_an_empty_wheel_folder_is_refused(check_gpu, no_subprocess, capsys, tmp_path):
    with pytest.raises(SystemExit):
        check_gpu.main(["--wheels", str(tmp_path)])
    assert "no folder of wheels there" in capsys.readouterr().err


# --------------------------------------------------------------------------------------
# No GPU: say so, run nothing, exit non-zero
# --------------------------------------------------------------------------------------


def test_without_a_gpu_it_says_so_and_runs_nothing(check_gpu, monkeypatch, capsys,
                                                   tmp_path):
    monkeypatch.setattr(check_gpu, "cuda_status",
                        lambda: (False, "torch 2.13.0+cpu (CUDA None): no CUDA device"))
    started = []
    monkeypatch.setattr(check_gpu.subprocess, "run", lambda *a, **k: started.append(a))
    (tmp_path / "nbval-0.11.0-py2.py3-none-any.whl").write_text("")
    assert check_gpu.main(["--wheels", str(tmp_path)]) == check_gpu.NO_GPU_EXIT != 0
    err = capsys.readouterr().err
    assert "No CUDA device found: torch 2.13.0+cpu (CUDA None): no CUDA device" in err
    assert started == []  # not even the installation from the wheel folder


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the script "
                    "would run every check")
def test_the_script_exits_non_zero_on_this_machine_without_a_gpu():
    result = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 3
    assert "No CUDA device found" in result.stderr
    assert "no CUDA device" in result.stderr  # what torch itself reports
    assert result.stdout == ""


# --------------------------------------------------------------------------------------
# The commands it runs
# --------------------------------------------------------------------------------------


def test_dry_run_prints_the_four_checks(check_gpu, no_subprocess, capsys, tmp_path):
    assert check_gpu.main(["--dry-run", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    commands = [c[1:] for c in _dry_run_commands(out)]  # without the interpreter
    assert commands == [
        ["-m", "pytest", "book", "--nbval", "-q", "-p", "no:cacheprovider"],
        ["-m", "pytest", "tests", "-q", "-p", "no:cacheprovider", "--ignore=tests/test_book.py"],
        ["benchmarks/attention.py", "--device", "cuda", "--compile", "--json"],
        ["benchmarks/decoding.py", "--device", "cuda", "--model", "base", "--beam", "4",
         "--json"],
        ["-m", "transformer_lib.examples.number_words", "--minutes", "0.5", "--device", "cuda",
         "--out", str(tmp_path / "number_words_de.pt")],
    ]
    assert all(c[0] == sys.executable for c in _dry_run_commands(out))
    assert "no GPU is looked for" in out


def test_only_runs_the_checks_named(check_gpu, no_subprocess, capsys):
    check_gpu.main(["--dry-run", "--only", "capstone", "nbval"])
    out = capsys.readouterr().out
    assert "[nbval]" in out and "[capstone]" in out
    assert "[tests]" not in out and "[benchmarks]" not in out


@pytest.mark.parametrize("command, options", [
    (["-m", "transformer_lib.examples.number_words"], ["--minutes", "--device", "--out"]),
    (["benchmarks/attention.py"], ["--device", "--compile", "--json", "--deterministic"]),
    (["benchmarks/decoding.py"], ["--device", "--model", "--beam", "--json",
                                  "--deterministic"]),
])
def test_the_commands_it_runs_accept_its_options(command, options):
    """The check's options exist in the tools it calls (their --help lists them)."""
    result = subprocess.run([sys.executable, *command, "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for option in options:
        assert option in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
@pytest.mark.parametrize("benchmark", ["attention.py", "decoding.py"])
def test_gpu_benchmarks_say_when_there_is_no_gpu(benchmark):
    result = subprocess.run([sys.executable, f"benchmarks/{benchmark}", "--device", "cuda"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "--device cuda: no CUDA device is visible" in result.stderr


# --------------------------------------------------------------------------------------
# The wheel folder: what it holds, how it is fetched and installed
# --------------------------------------------------------------------------------------


def test_the_wheel_folder_holds_the_lock_without_torch_and_cuda(check_gpu):
    sample = "\n".join([
        "#", "-e .", "    # via -", "accessible-pygments==0.0.5", "    # via x",
        "torch==2.13.0", "nvidia-cublas-cu12==12.6.4.1", "nvidia_cudnn_cu12==9.5.1.17",
        "triton==3.5.0", "jupyter-book==1.0.4.post1", "nbval==0.11.0", "setuptools==84.2.1"])
    assert check_gpu.wheel_requirements(sample) == [
        "accessible-pygments==0.0.5", "jupyter-book==1.0.4.post1", "nbval==0.11.0",
        "setuptools==84.2.1"]
    real = check_gpu.wheel_requirements((ROOT / "requirements.txt").read_text())
    names = {pin.split("==")[0] for pin in real}
    assert {"nbval", "pytest", "jupyterlab", "ipykernel", "setuptools"} <= names
    assert not {"torch", "triton"} & names
    assert not any(name.startswith("nvidia") for name in names)


def test_download_dry_run_asks_pip_for_wheels_of_that_python(check_gpu, no_subprocess,
                                                              capsys, tmp_path):
    folder = tmp_path / "wheels"
    assert check_gpu.main(["--download-wheels", str(folder), "--python-version", "3.12",
                           "--dry-run"]) == 0
    (command,) = _dry_run_commands(capsys.readouterr().out)
    assert command[1:4] == ["-m", "pip", "download"]
    for option in (["--only-binary=:all:"], ["--no-deps"], ["--python-version", "3.12"],
                   ["--implementation", "cp"], ["-d", str(folder)]):
        at = command.index(option[0])
        assert command[at:at + len(option)] == option
    abis = [command[i + 1] for i, c in enumerate(command) if c == "--abi"]
    assert abis == ["cp312", "abi3", "none"]  # its own ABI, the stable ABI, pure Python
    platforms = [command[i + 1] for i, c in enumerate(command) if c == "--platform"]
    assert platforms[0] == "manylinux_2_28_x86_64"
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"} <= set(
        platforms)
    pins = Path(command[command.index("-r") + 1]).read_text().split()
    assert "nbval==" in " ".join(pins) and not any(p.startswith("torch==") for p in pins)
    assert not folder.exists()  # a dry run writes nothing there


def test_the_manylinux_family_runs_down_to_manylinux1(check_gpu):
    family = check_gpu.manylinux_family("manylinux_2_28_x86_64")
    assert family[:2] == ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64"]
    assert family.index("manylinux2014_x86_64") == family.index("manylinux_2_17_x86_64") + 1
    assert family[-2:] == ["manylinux_2_5_x86_64", "manylinux1_x86_64"]
    assert len(family) == 24 + 3  # 2_28 ... 2_5, and the three legacy names
    assert check_gpu.manylinux_family("manylinux_2_17_aarch64")[0] == "manylinux_2_17_aarch64"
    assert check_gpu.manylinux_family("manylinux2014_x86_64") == ["manylinux2014_x86_64"]


LOCK = """\
-e .
    # via -
click==8.1.0
    # via typer
jinja2==3.1.6
    # via
    #   nbconvert
    #   sphinx
markupsafe==3.0.2
    # via jinja2
nbconvert==7.16.0
    # via -r requirements.in
numpy==2.4.6
    # via
    #   -r requirements.in
    #   transformer-lib
pytest==9.2.0
    # via
    #   -r requirements.in
    #   nbval
nbval==0.11.0
    # via -r requirements.in
sphinx==7.4.7
    # via jupyter-book
torch==2.13.0
    # via transformer-lib
typer==0.29.2
    # via transformer-lib
"""


def test_only_some_checks_download_only_what_they_need(check_gpu):
    """--only: the closure of the checks' roots in the lock's "# via" graph."""
    everything = check_gpu.wheel_requirements(LOCK)
    assert everything == ["click==8.1.0", "jinja2==3.1.6", "markupsafe==3.0.2",
                          "nbconvert==7.16.0", "numpy==2.4.6", "pytest==9.2.0",
                          "nbval==0.11.0", "sphinx==7.4.7", "typer==0.29.2"]
    assert check_gpu.wheel_requirements(LOCK, ["benchmarks"]) == [
        "click==8.1.0", "numpy==2.4.6", "typer==0.29.2"]  # typer's click too
    assert check_gpu.wheel_requirements(LOCK, ["nbval", "capstone"]) == [
        "click==8.1.0", "numpy==2.4.6", "pytest==9.2.0", "nbval==0.11.0", "typer==0.29.2"]
    assert check_gpu.wheel_requirements(LOCK, ["tests", "benchmarks"]) == everything
    real = (ROOT / "requirements.txt").read_text()
    small = check_gpu.wheel_requirements(real, ["nbval", "benchmarks", "capstone"])
    names = {pin.split("==")[0].lower() for pin in small}
    assert {"nbval", "pytest", "ipykernel", "nbclient", "numpy", "transformers"} <= names
    assert not {"jupyter-book", "sphinx", "playwright", "nbgrader"} & names
    assert len(small) < len(check_gpu.wheel_requirements(real))


def test_download_only_dry_run_passes_the_smaller_pin_list(check_gpu, no_subprocess, capsys,
                                                           tmp_path):
    check_gpu.main(["--download-wheels", str(tmp_path / "w"), "--only", "benchmarks",
                    "--dry-run"])
    (command,) = _dry_run_commands(capsys.readouterr().out)
    pins = Path(command[command.index("-r") + 1]).read_text().split()
    assert any(p.startswith("transformers==") for p in pins)
    assert not any(p.startswith(("nbval==", "playwright==")) for p in pins)


def test_the_benchmarks_and_chapters_run_without_deterministic_cublas(check_gpu, no_subprocess,
                                                                      capsys):
    """Only the library tests get CUBLAS_WORKSPACE_CONFIG (a test asking for bitwise
    equality on CUDA needs it set before cuBLAS starts); the rest run at full speed."""
    for name in ("nbval", "benchmarks", "capstone"):
        env = check_gpu.check_environment(name)
        assert env.get("CUBLAS_WORKSPACE_CONFIG") == __import__("os").environ.get(
            "CUBLAS_WORKSPACE_CONFIG")
        assert env["PYTHONHASHSEED"] == __import__("os").environ.get("PYTHONHASHSEED", "0")
    assert check_gpu.CHECK_ENVIRONMENT["tests"] == {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    check_gpu.main(["--dry-run", "--only", "tests", "benchmarks"])
    lines = [line for line in capsys.readouterr().out.splitlines() if "$ " in line]
    assert "CUBLAS_WORKSPACE_CONFIG=:4096:8" in lines[0]
    assert not any("CUBLAS" in line for line in lines[1:])


def test_wheels_dry_run_installs_from_the_folder_alone(check_gpu, no_subprocess, capsys,
                                                       tmp_path):
    check_gpu.main(["--wheels", str(tmp_path), "--dry-run", "--only", "tests"])
    install_pins, install_lib = _dry_run_commands(capsys.readouterr().out)[:2]
    offline = ["--no-index", "--find-links", str(tmp_path)]
    assert install_pins[1:4] == ["-m", "pip", "install"] and install_pins[4:7] == offline
    assert install_pins[7] == "-r"
    assert install_lib[4:] == [*offline, "--no-deps", "-e", str(ROOT)]


class FakePip:
    """Stands in for subprocess.run: pip download has no wheel for ``no_wheel`` pins;
    pip wheel builds ``pure`` pins into a none-any wheel, fails on ``broken`` ones, and
    builds the others into a cp312 one."""

    def __init__(self, no_wheel, pure, broken=()):
        self.no_wheel, self.pure, self.broken, self.calls = no_wheel, pure, broken, []

    def __call__(self, command, **kwargs):
        self.calls.append(command)
        if "download" in command:
            wanted = Path(command[command.index("-r") + 1]).read_text().split()
            for pin in self.no_wheel:
                if pin in wanted:
                    return subprocess.CompletedProcess(
                        command, 1, "", f"ERROR: No matching distribution found for {pin}\n")
            return subprocess.CompletedProcess(command, 0, "", "")
        pin, folder = command[-1], Path(command[command.index("-w") + 1])
        if pin in self.broken:
            return subprocess.CompletedProcess(
                command, 1, "", "ERROR: Failed to build installable wheels\n")
        name, version = pin.split("==")
        tag = "py3-none-any" if pin in self.pure else "cp312-cp312-linux_x86_64"
        (folder / f"{name}-{version}-{tag}.whl").write_text("")
        return subprocess.CompletedProcess(command, 0, "", "")


def test_download_builds_pure_python_sources_into_wheels(check_gpu, monkeypatch, tmp_path):
    fake = FakePip(no_wheel=["docopt==0.6.2"], pure=["docopt==0.6.2"])
    monkeypatch.setattr(check_gpu, "REQUIREMENTS", tmp_path / "requirements.txt")
    (tmp_path / "requirements.txt").write_text("nbval==0.11.0\ndocopt==0.6.2\ntorch==2.13.0\n")
    monkeypatch.setattr(check_gpu.subprocess, "run", fake)
    folder = tmp_path / "wheels"
    assert check_gpu.download_wheels(folder, "3.12", "manylinux_2_28_x86_64", False) == 0
    assert [c[3] for c in fake.calls] == ["download", "download", "wheel"]
    assert "--no-binary=:all:" in fake.calls[2]  # from the source, not a wheel of this machine
    assert [w.name for w in folder.iterdir()] == ["docopt-0.6.2-py3-none-any.whl"]


def test_download_refuses_compiled_packages_it_cannot_fetch(check_gpu, monkeypatch, tmp_path,
                                                           capsys):
    fake = FakePip(no_wheel=["cffi==2.1.1", "docopt==0.6.2"], pure=["docopt==0.6.2"])
    monkeypatch.setattr(check_gpu, "REQUIREMENTS", tmp_path / "requirements.txt")
    (tmp_path / "requirements.txt").write_text("cffi==2.1.1\ndocopt==0.6.2\n")
    monkeypatch.setattr(check_gpu.subprocess, "run", fake)
    assert check_gpu.download_wheels(tmp_path / "w", "3.12", "manylinux_2_28_x86_64",
                                     False) == 1
    err = capsys.readouterr().err
    assert ("No wheel for Python 3.12, manylinux_2_28_x86_64 or older manylinux of: "
            "cffi==2.1.1. Built from source here they hold compiled code") in err
    assert [w.name for w in (tmp_path / "w").iterdir()] == ["docopt-0.6.2-py3-none-any.whl"]


def test_a_failed_source_build_is_not_called_compiled(check_gpu, monkeypatch, tmp_path,
                                                      capsys):
    """A pure-Python package whose source did not build is reported as a failed build,
    never as 'compiled code'."""
    fake = FakePip(no_wheel=["hypothesis==6.0.0"], pure=[], broken=["hypothesis==6.0.0"])
    monkeypatch.setattr(check_gpu, "REQUIREMENTS", tmp_path / "requirements.txt")
    (tmp_path / "requirements.txt").write_text("hypothesis==6.0.0\n")
    monkeypatch.setattr(check_gpu.subprocess, "run", fake)
    assert check_gpu.download_wheels(tmp_path / "w", "3.12", "manylinux_2_28_x86_64",
                                     False) == 1
    err = capsys.readouterr().err
    assert "building from source failed, of: hypothesis==6.0.0 (ERROR: Failed to build" in err
    assert "compiled" not in err
