"""Results files (glassroom.ladder.results): CSV and JSON lines read alike, curves, and every refusal in one line."""

from __future__ import annotations


import pytest

from glassroom.errors import GlassroomError
from glassroom.ladder.results import fit_curve_law, read_results, read_source
from ladder_results_helpers import _curve_rows, table, write_csv, write_jsonl


def test_csv_and_jsonl_give_the_same_points_and_flops_default_to_6nd(tmp_path):
    rows = table()
    a = read_results(write_csv(tmp_path / "r.csv", rows))
    b = read_results(write_jsonl(tmp_path / "r.jsonl", rows))
    assert a.kind == "csv" and b.kind == "jsonl"
    assert a.points == b.points and len(a.points) == 12
    assert all(p.flops == pytest.approx(6 * p.params * p.tokens) for p in a.points)
    assert a.flops_from_6nd == 12 and a.summary()["sizes"] == 12
    # detected by content when the extension says nothing; suffixes and comments accepted
    (tmp_path / "r.txt").write_text("# from a paper\nname,params,tokens,flops,loss\na,1.6B,20B,2e20,2.5\nb,3.2B,40B,,2.3\n")
    c = read_results(tmp_path / "r.txt")
    assert c.points[0].params == 1.6e9 and c.points[0].flops == 2e20 and c.points[1].flops == 6 * 3.2e9 * 40e9


def test_seeds_make_repeats_of_one_size(tmp_path):
    r = read_results(write_csv(tmp_path / "s.csv", table(seeds=3, noise=0.01)))
    assert r.summary()["sizes"] == 12 and r.summary()["runs"] == 36 and r.summary()["seeds"] == 3


def test_ladder_folder_or_file_not_both():
    with pytest.raises(GlassroomError, match="not both"):
        read_source("x.csv", "lab/ladder")
    with pytest.raises(GlassroomError, match="give a ladder folder"):
        read_source(None, None)


def test_curves_feed_the_curve_law_and_end_in_points(tmp_path):
    rows, truth = _curve_rows()
    r = read_results(write_jsonl(tmp_path / "c.jsonl", rows))
    assert len(r.curves) == 3 and len(r.points) == 3
    assert [p.tokens for p in r.points] == [200 * 1024, 300 * 2048, 400 * 4096]
    fit = fit_curve_law(r.curves, bootstrap=0)
    for k in ("E", "alpha", "beta"):
        assert fit.params[k] == pytest.approx(truth[k], rel=0.02)
    same = read_results(write_csv(tmp_path / "c.csv", rows))
    assert same.points == r.points


GOOD = "name,params,tokens,flops,loss\na,1e8,2e9,1.2e18,3.1\nb,2e8,4e9,4.8e18,2.9\n"


@pytest.mark.parametrize("text,name,needle", [
    ("", "r.csv", "empty"),
    ("# only a comment\n\n", "r.csv", "empty"),
    ("name,params,tokens,flops,loss\n", "r.csv", "no runs"),
    ("name,params,tokens,flops\na,1e8,2e9,1e18\nb,2e8,4e9,4e18\n", "r.csv", "missing column(s) loss"),
    ("name,params,loss\na,1e8,3\nb,2e8,2.9\n", "r.csv", "missing column(s) tokens"),
    ("name,params,tokens,flops,loss\na,1e8,2e9,1.2e18\n", "r.csv", "line 2: 4 fields, the header has 5"),
    ("name,params,tokens,flops,loss\na,1e8,2e9,1.2e18,abc\nb,2e8,4e9,4e18,2.9\n", "r.csv", "line 2, column loss: 'abc' is not a number"),
    ("name,params,tokens,flops,loss\na,1e8,2e9,1.2e18,nan\nb,2e8,4e9,4e18,2.9\n", "r.csv", "column loss: nan is not a finite"),
    ("name,params,tokens,flops,loss\na,1e8,inf,1.2e18,3\nb,2e8,4e9,4e18,2.9\n", "r.csv", "column tokens: inf is not a finite"),
    ("name,params,tokens,flops,loss\na,1e8,2e9,1.2e18,-3\nb,2e8,4e9,4e18,2.9\n", "r.csv", "column loss: -3 must be above zero"),
    ("name,params,tokens,flops,loss\na,1e8,2e9,1.2e18,0\nb,2e8,4e9,4e18,2.9\n", "r.csv", "column loss: 0 must be above zero"),
    ("name,params,tokens,flops,loss\na,0,2e9,1.2e18,3\nb,2e8,4e9,4e18,2.9\n", "r.csv", "column params: 0 must be above zero"),
    ("name,params,tokens,flops,loss\na,1e8,2e9,-1,3\nb,2e8,4e9,4e18,2.9\n", "r.csv", "column flops: -1 must be above zero"),
    ("name,params,tokens,loss\na,1e200,1e200,3\nb,2e8,4e9,2.9\n", "r.csv", "6 * params * tokens"),
    ("name,params,tokens,loss\na,1e-300,2e9,3\nb,2e8,4e9,2.9\n", "r.csv", "column params: 1e-300 is below 1"),
    ("name,params,tokens,loss\na,1e8,1e400,3\nb,2e8,4e9,2.9\n", "r.csv", "column tokens: inf is not a finite"),
    ('{"name": "a", "params": 1e8, "tokens": 2e9, "loss": "-1\\n"}\n{"name": "b", "params": 2e8, "tokens": 4e9, "loss": 2}\n',
     "r.jsonl", "column loss: -1 must be above zero"),
    ("name,params,tokens,flops,loss\na,1e8,2e9,1.2e18,3\nb,1e8,2e9,1.2e18,2.9\n", "r.csv", "line 2 and line 3 are the same size"),
    ("name,params,tokens,seed,loss\na,1e8,2e9,0,3\nb,1e8,2e9,1,2.9\n", "r.csv", "all 2 run(s) are one size"),
    ("name,params,tokens,loss\na,1e8,2e9,3\n", "r.csv", "one size"),
    ("name,params,tokens,flops,loss\na,1e8,2e9,1.2e18,3\n{\"name\": \"b\"}\n", "r.csv", "line 3: a JSON object in a CSV file"),
    ('{"name": "a", "params": 1e8, "tokens": 2e9, "loss": 3}\nb,2e8,4e9,,2.9\n', "r.jsonl", "line 2: not a JSON object"),
    ('{"name": "a", "params": 1e8, "tokens": 2e9, "loss": 3}\n', "r.csv", "named .csv but its first line is a JSON"),
    (GOOD, "r.jsonl", "named .jsonl but its first line is not a JSON object"),
    ('{"name": "a", "params": 1e8, "tokens": 2e9, "loss": 3}\n{"name": "b", "params": 2e8, "loss": 2.9}\n', "r.jsonl",
     "line 2, column tokens: empty"),
    ('{"name": "a", "params": 1e8, "tokens": 2e9, "loss": 3}\n{"name": "b", "params": 2e8, "tokens": 4e9, "loss": true}\n',
     "r.jsonl", "column loss: True is not a number"),
    ('{"name": "a", "params": 1e8, "tokens": 2e9, "loss": 3}\n{"name": "b", "params": [2e8], "tokens": 4e9, "loss": 2}\n',
     "r.jsonl", "column params: [200000000.0] is not a number"),
    ('{"name": "a", "params": 1e8, "tokens": 2e9, "loss": 3}\n{"name": "b", "params": 2e8, \n', "r.jsonl", "line 2: unparseable JSON"),
    ('{"name": "a", "params": 1e8, "tokens": 2e9, "loss": NaN}\n{"name": "b", "params": 2e8, "tokens": 4e9, "loss": 2}\n',
     "r.jsonl", "line 1: unparseable JSON (NaN is not a number glassroom reads"),
    ("name,params,tokens,seed,loss\na,1e8,2e9,-1,3\nb,2e8,4e9,0,2.9\n", "r.csv", "column seed: -1 must be at least 0"),
    ("name,params,tokens,seed,loss\na,1e8,2e9,1.5,3\nb,2e8,4e9,0,2.9\n", "r.csv", "column seed: '1.5' is not a whole number"),
    ("name,params,tokens,loss,loss\na,1e8,2e9,3,3\n", "r.csv", "names column 'loss' twice"),
    ("name,params,tokens,step,loss\na,1e8,2e9,10,3\nb,2e8,4e9,10,2.9\n", "r.csv", "column schedule"),
    ("name,params,tokens,step,schedule,loss\na,1e8,2e9,10,cosine,3\na,1e8,4e9,10,cosine,2.9\n", "r.csv", "has step 10 twice"),
    ("name,params,tokens,step,schedule,total_steps,loss\na,1e8,1e9,5,cosine,10,3\nb,2e8,4e9,10,cosine,10,2.9\n",
     "r.csv", "ends at step 5 of total_steps 10"),
    ("name,params,tokens,step,schedule,loss\na,1e8,1e9,5,cosine,3\na,1e8,5e9,10,cosine,2.9\nb,2e8,4e9,10,cosine,2.8\n",
     "r.csv", "the curve law needs a constant batch"),
    ("name,params,tokens,step,schedule,loss\na,1e8,1e9,5,cosine,3\na,2e8,2e9,10,cosine,2.9\n", "r.csv", "changes its params"),
    ("name,params,tokens,schedule,loss\na,1e8,1e9,cosine,3\nb,2e8,2e9,cosine,2.9\n", "r.csv", "no step column"),
])
def test_bad_results_files_are_one_line_naming_the_file(tmp_path, text, name, needle):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(GlassroomError) as exc:
        read_results(path)
    message = str(exc.value)
    assert "\n" not in message and str(path) in message
    assert needle in message, message


def test_missing_file_folder_and_binary_are_one_line(tmp_path):
    for path, needle in ((tmp_path / "nope.csv", "no such results file"), (tmp_path, "is a folder")):
        with pytest.raises(GlassroomError, match=needle):
            read_results(path)
    (tmp_path / "b.csv").write_bytes(b"\xff\xfe\x00\x01garbage")
    with pytest.raises(GlassroomError, match="not UTF-8|NUL"):
        read_results(tmp_path / "b.csv")
