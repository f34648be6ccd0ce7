"""The docs stay true: every pointer from code or docs to a docs page and section resolves,
every linked page exists, and every ``fl-lightning`` command in the README and docs/ parses — ``fit``,
``validate`` and ``test`` through ``--print_config``, ``sweep`` through ``--print``, ``report`` by the run
folders it names — so a renamed option or a moved page fails here, not in a reader's terminal."""
import glob
import re
import shlex
from pathlib import Path

import pytest

from fl_lightning.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SOURCES = [p for base in ("fl_lightning", "callbacks", "tests", "benchmarks") for p in (ROOT / base).rglob("*.py")]
POINTER = re.compile(r'(docs/[\w/]+\.md), \\?"([^"\\]+)')
PLACEHOLDER = re.compile(r"<\w+>|\.\.\.|\$|/path/|/shared/|\{")


def headings(page: Path) -> list[str]:
    return [line.lstrip("#").strip() for line in page.read_text().splitlines() if line.startswith("#")]


def test_every_pointer_to_a_docs_section_resolves():
    pointers = [(path, page, section) for path in SOURCES + PAGES for page, section in POINTER.findall(path.read_text())]
    assert len(pointers) >= 15
    for path, page, section in pointers:
        assert (ROOT / page).is_file(), f"{path}: {page} does not exist"
        assert any(" ".join(section.split()) in heading for heading in headings(ROOT / page)), f"{path}: no section {section!r} in {page}"
    for page in PAGES:
        for link in re.findall(r"\]\(([\w./-]+\.md)\)", page.read_text()):
            assert (page.parent / link).is_file(), f"{page.name} links to {link}, which does not exist"


def commands() -> list[tuple[str, list[str], str]]:
    """(where and what, arguments, the error line the page shows after it or "")."""
    found = []
    for page in PAGES:
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", page.read_text(), re.S):
            lines = block.replace("\\\n", " ").splitlines()
            for number, line in enumerate(lines):
                match = re.search(r"(?:^|\s)fl-lightning ([\w-]+)(.*)", line.strip())
                if match and not line.strip().startswith("#"):
                    words = shlex.split(match.group(2).split(" # ")[0].split("   #")[0])
                    after = lines[number + 1].strip() if number + 1 < len(lines) else ""
                    error = after[2:].split(" (")[0] if after.startswith("# fl-lightning: error:") else ""
                    found.append((f"{page.name}: fl-lightning {match.group(1)} {' '.join(words)}",
                                  [match.group(1), *words], error))
    return found


COMMANDS = commands()


@pytest.fixture(scope="module")
def walkthrough_module(tmp_path_factory):
    """docs/write_your_own_algorithm.md's my_feddyn.py, written from the page, as its commands expect."""
    page = (ROOT / "docs" / "write_your_own_algorithm.md").read_text()
    (code,) = [block for block in re.findall(r"```python\n(.*?)```", page, re.S) if block.startswith("# my_feddyn.py")]
    folder = tmp_path_factory.mktemp("walkthrough")
    (folder / "my_feddyn.py").write_text(code)
    return folder


def test_the_docs_show_commands_of_every_kind():
    kinds = {args[0] for _, args, _ in COMMANDS}
    assert {"fit", "sweep", "report"} <= kinds and len(COMMANDS) >= 30


@pytest.mark.parametrize("shown, args, error", COMMANDS, ids=[shown[:90] for shown, _, _ in COMMANDS])
def test_a_documented_command_parses(shown, args, error, monkeypatch, capsys, walkthrough_module):
    if PLACEHOLDER.search(" ".join(args)):
        pytest.skip("a template (placeholders to fill in)")
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(walkthrough_module))
    if args[0] == "report":
        runs = []
        for word in args[1:]:  # the positional run folders come first
            if word.startswith("-"):
                break
            runs.append(word)
        assert runs, shown
        for run in runs:
            if run.startswith("docs/"):
                assert glob.glob(str(ROOT / run)), f"{shown}: {run} is not in the repository"
        return
    if args[0] == "sweep":
        assert main([*args, "--print"]) == 0, shown
        assert "fl-lightning fit" in capsys.readouterr().out
        return
    if args[0] == "flower-local":  # starts processes: its options are fit's, and --nodes N (docs/deployment.md)
        nodes = args.index("--nodes")
        assert args[nodes + 1].isdigit(), shown
        args = ["fit", *args[1:nodes], *args[nodes + 2:]]
    assert args[0] in ("fit", "validate", "test", "blocks", "algorithms", "privacy"), shown
    if args[0] in ("algorithms", "privacy"):  # quick answers: run them
        assert main(args) == 0, f"{shown}: {capsys.readouterr().err[-500:]}"
        return
    try:
        code = main([*args, "--print_config"])
    except SystemExit as stop:
        code = stop.code
    if error:  # the page shows the command failing, with this line
        assert code == 2 and capsys.readouterr().err.strip().startswith(error), shown
        return
    assert code in (0, None), f"{shown}: {capsys.readouterr().err[-500:]}"


def test_the_docs_name_every_registered_part():
    """A new algorithm, codec, data set, model, client runner, sampler, round schedule, system profile or privacy
    mechanism is its file plus its registration; the docs must list it (no hand-kept list in the code):
    docs/algorithms.md every algorithm and codec, docs/command_line.md every data set, client runner, sampler and
    round schedule, docs/models_and_data.md every model, docs/systems.md every profile, docs/privacy.md every
    mechanism."""
    from fl_lightning.algorithms.names import REGISTRY
    from fl_lightning.compression import CODECS
    from fl_lightning.data import DATASETS
    from fl_lightning.federation.runners import RUNNERS
    from fl_lightning.federation.seams import SAMPLERS, SCHEDULES
    from fl_lightning.models import MODELS
    from fl_lightning.privacy.mechanism import MECHANISMS
    from fl_lightning.systems import PROFILES

    algorithms, options = (ROOT / "docs" / "algorithms.md").read_text(), (ROOT / "docs" / "command_line.md").read_text()
    assert [n for n in REGISTRY if f"`{n}`" not in algorithms] == []
    assert [n for n in CODECS if n not in algorithms] == []
    dataset_row = next(line for line in options.splitlines() if line.startswith("| `--data.dataset`"))
    assert [n for n in DATASETS if f"`{n}`" not in dataset_row] == []
    runner_row = next(line for line in options.splitlines() if line.startswith("| `--model.client_runner`"))
    assert [n for n in RUNNERS if f"`{n}`" not in runner_row] == []
    sampler_row = next(line for line in options.splitlines() if line.startswith("| `--model.sampler`"))
    assert [n for n in SAMPLERS if f"`{n}`" not in sampler_row] == []
    schedule_row = next(line for line in options.splitlines() if line.startswith("| `--model.schedule`"))
    assert [n for n in SCHEDULES if f"`{n}`" not in schedule_row] == []
    models = (ROOT / "docs" / "models_and_data.md").read_text()
    assert [n for n in MODELS if f"`{n}`" not in models] == []
    systems = (ROOT / "docs" / "systems.md").read_text()
    assert [n for n in PROFILES if f"`{n}`" not in systems] == []
    privacy = (ROOT / "docs" / "privacy.md").read_text()
    mechanisms = privacy[privacy.index("- **Mechanism**"):].split("\n- ")[0]
    assert [n for n in MECHANISMS if f"`{n}`" not in mechanisms] == []
