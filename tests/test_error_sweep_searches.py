"""The error sweep's istar-tune and istar-report SEARCH_DIR cases (scripts/error_sweep.py, ``search: ...``): each is
refused in the exact one line below, leaving nothing written and nothing of the user's changed, and a SIGINT during a
trial leaves it resumable (tests/test_search_files.py checks the search-file refusals in this process)."""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))  # scripts/ is no package
from unprivileged import Unavailable, command_wrapper

ROOT = Path(__file__).resolve().parents[1]
LINES = {  # each case's last line of stderr ({case}: its folder), as the sweep keeps it (150 characters)
    "search: a search file that is not YAML": 'istar-tune: error: search file {case}/s.yaml is not valid YAML: while '
                                              'parsing a flow sequence in "{case}/s.yaml", line 1, column 17',
    "search: a search file that is a folder": "istar-tune: error: cannot read search file {case}/s.yaml: it is a "
                                              "folder, not a file (name a file)",
    "search: an empty search file": "istar-tune: error: search file {case}/s.yaml is empty; keys: description, base, "
                                    "fixed, space, seeds, trials, sampler, pruner, baseline, final_seeds, storage",
    "search: a space that is not a mapping": "istar-tune: error: search file {case}/s.yaml: space must map at least "
                                             "one run key to its range or choices",
    "search: choices with duplicates": "istar-tune: error: space.optim.lr.choices must be distinct scalars, got "
                                       "[0.0001, 0.0001]",
    "search: a dimension with low = high": "istar-tune: error: space.optim.lr: low must be below high, got low=0.0001, "
                                           "high=0.0001",
    "search: an integer range with fractional bounds": "istar-tune: error: space.eval_every: an integer range needs "
                                                       "whole low and high, got low=1.5, high=4.5",
    "search: trials=0": "istar-tune: error: trials must be an integer from 1 to 100000, got 0",
    "search: trials=abc": "istar-tune: error: trials must be an integer from 1 to 100000, got 'abc'",
    "search: seeds=[]": "istar-tune: error: seeds must be a list of seeds (integers >= 0), got []",
    "search: seeds=[-1]": "istar-tune: error: seeds must be a list of seeds (integers >= 0), got [-1]",
    "search: final_seeds=x": "istar-tune: error: final_seeds must be a list of seeds (integers >= 0), got 'x'",
    "search: workers=-2": "istar-tune: error: workers must be a positive integer, got '-2'",
    "search: storage postgresql without its driver": "istar-tune: error: storage "
                                                     "'postgresql+pg8000://nobody@127.0.0.1:9/none' needs a database "
                                                     "driver this Python lacks: pip install pg8000",
    "search: storage sqlite in a missing folder": "istar-tune: error: cannot open the study's database "
                                                  "'sqlite:////no/such/dir/x.db': unable to open database file",
    "search: storage journal in a missing folder": "istar-tune: error: cannot open the study's database "
                                                   "'journal:/no/such/dir/x.journal': [Errno 2] No such file or "
                                                   "directory: '/no/such/dir/x.journal'",
    "search: search_dir is a file": "istar-tune: error: search_dir {case}/f/search: exists and is not a directory; "
                                    "choose another search_dir",
    "search: search_dir holds the user's files": "istar-tune: error: search_dir {case}/mine: exists and holds files "
                                                 "istar_plugin did not write (model, thesis.tex); choose a new or "
                                                 "empty search_dir, nothing was changed",
    "search: search_dir holds another search": "istar-tune: error: search_dir {case}/search holds another search (s; "
                                               "differs at final_seeds, seeds); choose another search_dir=, nothing "
                                               "was changed",
    "search: a damaged search.yaml in the search_dir": "istar-tune: error: {case}/search/search.yaml is damaged (not "
                                                       "YAML: while parsing a flow node expected the node content",
    "search: --final before any trial ended": "istar-tune: error: 2 of the 2 trials have not ended (running elsewhere, "
                                              "or their workers stopped): run istar-tune {case}/s.yaml again to resume "
                                              "them, then --final",
    "search: --final when every trial failed": "istar-tune: error: no trial of search s finished (2 fail): there is no "
                                               "setting to compare",
    "search: report of a corrupt study.db": "istar-report: error: cannot open the study's database "
                                            "'sqlite:///{case}/search/study.db': file is not a database; it is "
                                            "damaged: restore it",
    "search: report of a missing study.db": "istar-report: error: search directory {case}/search: its study database "
                                            "{case}/search/study.db is missing (istar-tune writes it when the search "
                                            "starts); no report written",
    "search: report of a damaged search.yaml": "istar-report: error: {case}/search/search.yaml is damaged (not YAML: "
                                               "while parsing a flow node expected the node content",
    "search: report of an archive whose study.json is damaged": "istar-report: error: search archive {case}/archive: "
                                                                "its study record {case}/archive/study.json is damaged "
                                                                "(Expecting value",
    "search: --archive into the search itself": "istar-report: error: --archive {case}/search is inside the search "
                                                "{case}/search: choose a folder outside it",
    "search: search file unreadable, as a user": "istar-tune: error: cannot read search file {case}/s.yaml: permission "
                                                 "denied (check its mode and owner)",
    "search: SIGINT during a trial, then resumed": "istar-tune: error: stopped by SIGINT after step ",
    "search: storage an in-memory SQLite database": "istar-tune: error: storage 'sqlite:///:memory:' is an in-memory "
                                                    "database, which ends with its process: a study must outlive it; "
                                                    "give a file (sqlite://",
    "search: storage with a damaged page": "istar-tune: error: cannot open the study's database "
                                           "'sqlite:///{case}/search/study.db': database disk image is malformed; it "
                                           "is damaged: restore it from a copy",
    "search: storage read-only, as a user": "istar-tune: error: cannot use the study's database "
                                            "'sqlite:///{case}/ro.db': attempt to write a readonly database; make it "
                                            "writable by this user",
    "search: a second search_dir on the same storage and study name": "istar-tune: error: the study s in "
                                                                      "sqlite:///{case}/shared.db belongs to the "
                                                                      "search in {case}/search: run it there",
    "search: extended after its training file changed": "istar-tune: error: the data of search s changed since its "
                                                        "first trials: train ({case}/t.tsv: 16 examples then, 16 now, "
                                                        "their c",
    "search: log: 'false', a string": "istar-tune: error: space.optim.lr.log must be true or false (unquoted), got "
                                      "'false'",
    # the hanging server's port is the case's own: the line up to it (the sweep checks the rest: a timeout, no password)
    "search: storage a server that accepts and never answers": "istar-tune: error: cannot open the study's database "
                                                               "'postgresql://sweep:***@127.0.0.1:",
    "search: report of a search whose server never answers": "istar-report: error: cannot open the study's database "
                                                             "'postgresql://sweep:***@127.0.0.1:",
}


@pytest.mark.slow  # 37 cases: a search's refusals in this process, one training run stopped by SIGINT and resumed
def test_every_search_case_of_the_sweep_is_refused_in_its_one_line(tmp_path, shared_data):
    names = list(LINES)
    try:
        command_wrapper(sys.executable, ROOT)
    except Unavailable as reason:
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must run the error sweep's cases run as uid 65534", pytrace=False)
        names = [name for name in LINES if not name.endswith("as a user")]
    work = Path(tempfile.mkdtemp(prefix="istar-sweep-"))  # the unprivileged user may enter it (tmp_path: 0700)
    work.chmod(0o755)
    try:
        only = [argument for name in names for argument in ("--only", glob.escape(name))]
        result = subprocess.run([sys.executable, str(ROOT / "scripts" / "error_sweep.py"), "--work", str(work / "s"),
                                 "--json", str(tmp_path / "sweep.json"), *only],
                                capture_output=True, text=True, timeout=1200)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        cases = json.loads((tmp_path / "sweep.json").read_text())["cases"]
    finally:
        shutil.rmtree(work)
    assert [case["case"] for case in cases] == names
    for number, case in enumerate(cases, start=1):
        expected = LINES[case["case"]].format(case=work / "s" / f"case{number:02d}")
        assert (case["verdict"], case["last_line"][:len(expected)]) == ("clear", expected[:150]), case
    signal_case = next(case for case in cases if case["case"] == "search: SIGINT during a trial, then resumed")
    assert signal_case["exit"] == 130 and "| next start: trial 0 resumed: optim.lr=" in signal_case["note"]
