"""Showing results (issue 43): `Execution.outputs` holds what a notebook would show,
`display()` in both tiers, figures and tables in the native tier with matplotlib."""

import base64
import json
import struct
import subprocess

import pytest

import sandpy

from conftest import REPO

# The venv the CLI's tests make for figures (tests/all/native_outputs.rs, same pins).
PACKAGES = ["numpy==2.4.6", "pandas==3.1.1", "matplotlib==3.11.2"]
VENV = REPO / "target" / "native-figures-venv"


@pytest.fixture(scope="module")
def figures_config(tmp_path_factory, cli):
    marker = VENV / ".installed"
    if not marker.is_file() or marker.read_text() != " ".join(PACKAGES):
        args = [str(cli), "build", "--native", "--output", str(VENV)]
        for package in PACKAGES:
            args += ["--with", package]
        subprocess.run(args, check=True)
        marker.write_text(" ".join(PACKAGES))
    config = tmp_path_factory.mktemp("figures") / "sandpy.json"
    config.write_text(json.dumps({"sandpy": {"native": {"venv": str(VENV)}}}))
    return config


def test_display_and_the_final_value_are_outputs_in_order(sb):
    code = (
        "class Note:\n"
        "    def _repr_markdown_(self): return '**bold**'\n"
        "    def __repr__(self): return 'Note()'\n"
        "display(Note())\n"
        "6 * 7"
    )
    r = sb.run(code)
    assert r.ok, r.stderr
    assert r.outputs == [
        {"kind": "display", "data": {"text/markdown": "**bold**", "text/plain": "Note()"}},
        {"kind": "result", "data": {"text/plain": "42"}},
    ]
    assert r.return_value == 42 and r.outputs_dropped == 0
    assert r.to_dict()["outputs"] == r.outputs
    many = sb.run("for i in range(1000):\n    display(i)")
    assert len(many.outputs) == 100 and many.outputs_dropped == 900


def test_native_figure_is_a_png_and_a_table_is_html(figures_config):
    native = sandpy.Sandbox(config=figures_config, tier="native")
    r = native.run(
        "import matplotlib.pyplot as plt, pandas as pd\n"
        "plt.plot([1, 4, 9]); plt.show()\n"
        "pd.DataFrame({'city': ['Lyon', 'Oslo']})"
    )
    assert r.ok, r.stderr
    figure, table = r.outputs
    png = base64.b64decode(figure["data"]["image/png"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])
    assert width > 300 and height > 200
    assert table["kind"] == "result" and "Oslo" in table["data"]["text/html"]
    # A session's second cell starts with no open figure.
    s = native.session()
    s.run("import matplotlib.pyplot as plt\nplt.plot([1, 2])")
    second = s.run("plt.figure()\nbars = plt.bar(['a'], [1])")
    assert [o["data"]["text/plain"] for o in second.outputs] == ["<Figure size 640x480 with 1 Axes>"]
    # A cell that fails still shows its figure, and so do the cells after it.
    failed = s.run("plt.plot([3, 1])\n1 / 0")
    assert failed.status == "error" and len(failed.outputs) == 1
    after = s.run("plt.plot([1, 3])\nNone")
    assert [o["data"]["text/plain"] for o in after.outputs] == ["<Figure size 640x480 with 1 Axes>"]
