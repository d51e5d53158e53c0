"""The Python examples of the documentation run as written."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python_blocks(markdown: Path, heading: str):
    text = markdown.read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return re.findall(r"```python\n(.*?)```", text[start : end if end > 0 else None], re.S)


def test_readme_python_section_runs(capsys):
    blocks = python_blocks(ROOT / "README.md", "## Using it from Python")
    assert blocks, "README.md lost its Python example"
    namespace = {}
    for code in blocks:
        exec(compile(code, "README.md", "exec"), namespace)
    # The example spends (1, 1e-6) on output perturbation, then (2, 1e-6) on the sketch.
    spent = namespace["session"].ledger.spent
    assert abs(spent["epsilon"] - 3.0) < 1e-12 and abs(spent["delta"] - 2e-6) < 1e-18
    assert namespace["answers"].shape == (16, 64)
    assert "{'epsilon': 1.0, 'delta': 1e-06}" in capsys.readouterr().out
