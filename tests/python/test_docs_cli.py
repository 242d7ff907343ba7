"""docs/cli.md and README.md against the program itself (issue 32, item 8): a failure here is drift.

- every subcommand `mpsim --help` lists (and those of `study` and `hw`) has its section in docs/cli.md and a row in
  the subcommand tables of docs/cli.md and README.md, and every row names a subcommand;
- every option a command's `--help` lists appears in its section of docs/cli.md, and every option in the
  section's synopsis (a backticked `mpsim CMD ...`) and in README's examples of the command is one it takes;
- the console examples of docs/cli.md and README.md that run on the inputs docs/cli.md creates (formats, round,
  arith, verify --list, hist, underflow, rounding-error, updates) print what the docs show: a line "..." stands
  for any lines, and "..." inside a line for any text.
Each check prints what it compared."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

BIN = os.environ.get("MPSIM_BIN", "")
ROOT = os.environ.get("MPSIM_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
CLI_MD = os.path.join(ROOT, "docs", "cli.md")
README = os.path.join(ROOT, "README.md")

pytestmark = pytest.mark.skipif(not BIN or not os.path.exists(BIN), reason="MPSIM_BIN is not set to the built mpsim")

# The commands whose documented examples run here on the inputs of docs/cli.md, in seconds; train, study, gemm
# (its inputs are not in docs/cli.md), hw (a GPU) and verify --against / --only (sampling, timings) do not.
RUNNABLE = re.compile(r"^mpsim (formats|round|arith|hist|underflow|rounding-error|updates|verify --list)\b")


def run(args, cwd=None):
    return subprocess.run([BIN, *args], capture_output=True, text=True, cwd=cwd)


def help_sections(text):
    """{"Options": [lines], "Subcommands": [lines]} of a CLI11 help text."""
    sections, current = {}, None
    for line in text.splitlines():
        m = re.match(r"^(\w[\w ]*):$", line)
        if m:
            current = sections.setdefault(m.group(1), [])
        elif current is not None and line.startswith("  ") and line.strip():
            current.append(line)
    return sections


def options_of(path):
    text = run([*path, "--help"]).stdout
    opts = set()
    for line in help_sections(text).get("Options", []):
        first = line.split()[0]
        for flag in first.split(","):
            if flag.startswith("--") and flag != "--help":
                opts.add(flag)
    return opts


def subcommands_of(path):
    text = run([*path, "--help"]).stdout
    return [line.split()[0] for line in help_sections(text).get("Subcommands", []) if not line.startswith("   ")]


def commands():
    """Every command path: ["round"], ["study", "loss-scaling"], ["hw", "convert"], ... `mpsim hw` hands its
    arguments to mpsim-hw, which a build without CUDA lacks: then hw lists no subcommands and is left out."""
    out = []
    for name in subcommands_of([]):
        subs = subcommands_of([name])
        if name == "hw" and not subs:
            print("\nhw: no CUDA build (mpsim-hw lists no subcommands), its options not compared")
            continue
        out += [[name, s] for s in subs] if subs else [[name]]
    return out


def markdown_sections(text):
    """{heading: body} for the ## and ### headings."""
    parts = re.split(r"^(#{2,3}) (.+)$", text, flags=re.M)
    return {parts[i + 1].strip(): parts[i + 2] for i in range(1, len(parts) - 2, 3)}


def doc_section(path, sections):
    """The docs/cli.md text that documents a command: its section; the analysis commands also get the section
    of their common options; a hw subcommand the hw section."""
    name = " ".join(path)
    if name in sections:
        body = sections[name]
    elif path[0] in sections:
        body = sections[path[0]]
    else:
        return None
    if path[0] in ("hist", "underflow", "rounding-error", "updates"):
        body = sections["The analysis commands: hist, underflow, rounding-error, updates"] + body
    return body


def flags_in(text):
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text))


def test_every_subcommand_is_documented():
    cli = open(CLI_MD, encoding="utf-8").read()
    readme = open(README, encoding="utf-8").read()
    top = subcommands_of([])
    # The first column of the subcommand tables: [`round`](#round) in docs/cli.md, `round` in README.md.
    cli_rows = set(re.findall(r"^\| \[`([a-z -]+?)(?: \.\.\.)?`\]", cli, flags=re.M))
    table = readme[readme.index("| subcommand | purpose | example |"):]
    table = table[:table.index("\n\n")]
    readme_rows = {cell.split()[0] for cell in re.findall(r"^\| `([a-z][a-z |\\-]*)` \|", table, flags=re.M)}
    cli_top = {r.split()[0] for r in cli_rows}
    print(f"\nsubcommands: {len(top)} in --help, {len(cli_top)} rows in docs/cli.md, "
          f"{len(readme_rows)} in README.md")
    assert sorted(cli_top) == sorted(top), f"docs/cli.md table {sorted(cli_top)} vs --help {sorted(top)}"
    missing = sorted(set(top) - readme_rows)
    extra = sorted(readme_rows - set(top))
    assert not missing and not extra, f"README table: missing {missing}, not commands {extra}"
    sections = markdown_sections(cli)
    undocumented = [" ".join(p) for p in commands() if doc_section(p, sections) is None]
    assert not undocumented, f"no section in docs/cli.md for {undocumented}"


def test_options_match_help():
    cli = open(CLI_MD, encoding="utf-8").read()
    readme = open(README, encoding="utf-8").read()
    sections = markdown_sections(cli)
    compared = 0
    problems = []
    for path in commands():
        name = " ".join(path)
        opts = options_of(path)
        body = doc_section(path, sections)
        documented = flags_in(body)
        for o in sorted(opts - documented):
            problems.append(f"{name}: {o} is in --help but not in docs/cli.md")
        # Synopses and examples: `mpsim CMD ...` in backticks or after "$ " in docs/cli.md's section, and in README.
        pattern = r"(?:`|\$ )mpsim " + re.escape(name) + r"(?= |`)([^`\n]*)"
        synopsis = re.findall(pattern, body) + re.findall(pattern, readme)
        for text in synopsis:
            text = text.split("#")[0].split("|")[0] if "--" in text else text
            for o in sorted(flags_in(text) - opts - {"--help"}):
                problems.append(f"{name}: the docs write {o}, which `mpsim {name} --help` does not list")
        compared += len(opts)
    print(f"\noptions: {compared} options of {len(commands())} commands against docs/cli.md; "
          f"{len(problems)} problems")
    for p in problems:
        print("  " + p)
    assert not problems


INPUTS = None


def doc_inputs(tmp):
    """Runs the numpy snippet of docs/cli.md ("The examples below run in a folder holding these inputs") in tmp."""
    cli = open(CLI_MD, encoding="utf-8").read()
    m = re.search(r"The examples below run in a folder holding these inputs.*?```python\n(.*?)```", cli, flags=re.S)
    assert m, "docs/cli.md lost its inputs snippet"
    subprocess.run([sys.executable, "-c", m.group(1)], cwd=tmp, check=True)


def console_examples(text):
    """(command, expected output lines) for each `$ mpsim ...` of the console blocks in text."""
    out = []
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        current = None
        for line in block.splitlines():
            if line.startswith("$ "):
                current = [line[2:], []]
                out.append(current)
            elif current is not None:
                current[1].append(line)
    return out


def matches(expected, actual):
    """The documented output (with "..." elisions) against the program's, line by line."""
    pattern = ""
    for line in expected:
        if line.strip() == "...":
            pattern += r"(?:[^\n]*\n)*?"
        else:
            pattern += ".*?".join(re.escape(part) for part in line.rstrip().split("...")) + r"[ \t]*\n"
    return re.fullmatch(pattern, "".join(l.rstrip() + "\n" for l in actual.splitlines())) is not None


def test_console_examples_print_what_the_docs_show(tmp_path):
    doc_inputs(tmp_path)
    os.symlink(BIN, tmp_path / "mpsim")
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ.get('PATH', '')}")
    ran = 0
    failures = []
    for doc in (CLI_MD, README):
        for command, expected in console_examples(open(doc, encoding="utf-8").read()):
            command = command.split("  #")[0].strip()
            if not RUNNABLE.match(command):
                continue
            # `python -c ...` lines between examples are not commands of ours: skip the expected output they own.
            r = subprocess.run(command, shell=True, capture_output=True, text=True, cwd=tmp_path, env=env)
            actual = r.stdout + r.stderr
            ran += 1
            if not matches(expected, actual):
                failures.append(f"{os.path.basename(doc)}: $ {command}\n--- docs:\n" + "\n".join(expected) +
                                "\n--- program:\n" + actual)
    print(f"\nconsole examples: {ran} run from docs/cli.md and README.md, {len(failures)} differ")
    for f in failures:
        print(textwrap.indent(f, "  "))
    assert ran >= 10
    assert not failures
