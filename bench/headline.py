#!/usr/bin/python3
"""The README's headline table, from the RESULT lines of bench/results/*.jsonl.

usage: headline.py [RESULTS_DIR]     (default: the results/ folder beside this script)

Every figure is set beside its baseline from the same run (a run is a record's `call`, less its
", pass N"; else its `run`; else its date and commit), never beside a number measured on
another machine or day. For each table the newest run that holds every figure the table needs
is used; repeated records of one figure in a run (rounds, passes) give their median. A run whose
nmt-serve records carry several builds or configurations (`commit`, `label`, ...) compares
experiments and is passed over. Each non-blank line is a JSON object, "RESULT " before it or not (the
benchmark scripts print the prefix, some results files keep it); any other line stops the
script, naming its file and line."""
import glob
import json
import os
import re
import statistics
import sys

PRECISION = "float16"  # the GPU figures' precision, beam 4 their beam
ENGINE_BATCHES = (64, 256, 1024)
SERVED_CLIENTS = (1, 64, 256)
# Fields that tell one nmt-serve build or configuration from another inside a run (the
# comparison scripts name each build in `commit`).
CONFIGURATION = ("commit", "label", "variant", "follow_rows", "split_rows", "graphs", "model_kind")


def load(folder):
    """Every record of the folder's .jsonl files, in file-name then line order."""
    records = []
    for path in sorted(glob.glob(os.path.join(folder, "*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    record = json.loads(line[len("RESULT "):] if line.startswith("RESULT ") else line)
                except json.JSONDecodeError as e:
                    sys.exit(f"{path}:{number}: not a JSON result: {e}")
                if not isinstance(record, dict):
                    sys.exit(f"{path}:{number}: not a JSON object")
                records.append(record)
    return records


def run_of(r):
    if r.get("call"):
        return re.sub(r", pass \d+$", "", r["call"])
    return r.get("run") or f"{r.get('date')} {r.get('commit')}"


def model_of(r):
    """The model's name with the temporary folders of the runs left out."""
    name = str(r.get("model") or "")
    base = os.path.basename(name.rstrip("/"))
    if "m30k-en-de-small" in name:
        return "demo (m30k-en-de-small)"
    if base == "base" or "transformer-base" in name:
        return "Transformer-base (random weights)"
    if base == "big" or "transformer-big" in name:
        return "Transformer-big (random weights)"
    return base or "?"


def runs(records):
    """{run: [records]} in the order each run last appears (newest last: the files append)."""
    grouped = {}
    for r in records:
        key = run_of(r)
        grouped[key] = grouped.pop(key, [])
        grouped[key].append(r)
    return grouped


def median(values):
    return statistics.median(values) if values else None


def measured(r):
    """Whether a record is of the headline's setting: float16, beam 4."""
    return r.get("precision") == PRECISION and r.get("beam") == 4


def offline(rs, engine, model, batch, field):
    """Median of `field` over the run's offline records of engine/model at this batch."""
    return median([r[field] for r in rs if r.get("engine") == engine and model_of(r) == model
                   and r.get("batch") == batch and measured(r) and field in r])


def one_configuration(rs, model):
    configs = {tuple(str(r.get(k)) for k in CONFIGURATION) for r in rs
               if r.get("engine") == "nmt-serve" and model_of(r) == model}
    return len(configs) == 1


def where(rs):
    r = next(r for r in rs if r.get("engine") in ("nmt-serve", "nmt-server"))
    commit = str(r.get("commit", "?")).split(" ")[0]
    return f"{run_of(r)} ({commit}, {r.get('date', '?')}, {r.get('device', '?')})"


def ratio(a, b):
    return f"{a / b:.1f}x" if a and b else "-"


def number(v):
    return f"{v:,.0f}" if v is not None else "-"


def engine_table(grouped, baseline, required):
    """Our offline tokens/s against `baseline` at ENGINE_BATCHES and batch 1 (those of them both
    engines have in the run; a run must have every batch of `required`), and batch-1 p50
    latency where both have it."""
    lines = []
    models = sorted({model_of(r) for rs in grouped.values() for r in rs if r.get("engine") == baseline},
                    key=lambda m: (not m.startswith("demo"), m))
    for model in models:
        chosen = None
        for rs in grouped.values():
            batches = [b for b in ENGINE_BATCHES + (1,) if offline(rs, "nmt-serve", model, b, "tokens_per_s")
                       and offline(rs, baseline, model, b, "tokens_per_s")]
            if batches and one_configuration(rs, model) and set(required) <= set(batches):
                chosen = (rs, batches)
        if not chosen:
            continue
        rs, batches = chosen
        for b in sorted(batches, key=lambda b: (b == 1, b)):
            ours = offline(rs, "nmt-serve", model, b, "tokens_per_s")
            theirs = offline(rs, baseline, model, b, "tokens_per_s")
            lines.append(f"| {model} | {b} | {number(ours)} | {number(theirs)} | {ratio(ours, theirs)} | {where(rs)} |")
        ours = offline(rs, "nmt-serve", model, 1, "p50_ms")
        theirs = offline(rs, baseline, model, 1, "p50_ms")
        if ours and theirs:
            lines.append(f"| {model} | 1, p50 latency | {ours:.2f} ms | {theirs:.2f} ms | "
                         f"{theirs / ours:.1f}x | {where(rs)} |")
    return lines


def served(rs, clients, field):
    """Median of `field` over the run's served single-sentence Translate loads at `clients`."""
    values = [r[field] if field != "p50_ms" else r["latency_ms"]["p50"] for r in rs
              if r.get("engine") == "nmt-server" and r.get("clients") == clients and measured(r)
              and r.get("sentences_per_request") == 1 and r.get("rpc", "Translate") == "Translate"
              and not r.get("busy_poll") and not r.get("connections") and not r.get("errors")
              and (field != "p50_ms" or "latency_ms" in r) and (field == "p50_ms" or field in r)]
    return median(values)


def served_table(grouped):
    """Served sentences/s as a fraction of offline at the batch the clients keep in flight; one
    client as offline batch-1 p50 latency over served p50 (a closed loop's rate is 1/latency)."""
    chosen = None
    for rs in grouped.values():
        models = {model_of(r) for r in rs if r.get("engine") == "nmt-serve"}
        if len(models) != 1 or not one_configuration(rs, next(iter(models))):
            continue
        model = next(iter(models))
        if offline(rs, "nmt-serve", model, 1, "p50_ms") and served(rs, 1, "p50_ms") and all(
                offline(rs, "nmt-serve", model, c, "sentences_per_s") and served(rs, c, "sentences_per_s")
                for c in SERVED_CLIENTS if c > 1):
            chosen = (rs, model)
    if not chosen:
        return []
    rs, model = chosen
    lines = []
    for c in SERVED_CLIENTS:
        if c == 1:
            ours, off = served(rs, 1, "p50_ms"), offline(rs, "nmt-serve", model, 1, "p50_ms")
            lines.append(f"| {model} | 1 | p50 {ours:.2f} ms | batch 1 p50 {off:.2f} ms | "
                         f"{100 * off / ours:.0f}% | {where(rs)} |")
        else:
            ours, off = served(rs, c, "sentences_per_s"), offline(rs, "nmt-serve", model, c, "sentences_per_s")
            lines.append(f"| {model} | {c} | {number(ours)} sentences/s | batch {c} {number(off)} sentences/s | "
                         f"{100 * ours / off:.0f}% | {where(rs)} |")
    return lines


def exactness_table(records):
    """The newest record of each (suite, device, precision, search)."""
    newest = {}
    for r in records:
        if r.get("bench") == "exactness":
            newest[(r["suite"], r["device"], r["precision"], r["search"])] = r
    return [f"| {r['suite']} | {r['device']} | {r['precision']} | {r['search']} | "
            f"{r['identical']}/{r['of']} | {run_of(r)} ({r['commit']}, {r['date']}) |"
            for r in newest.values()]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "results")
    records = load(folder)
    grouped = runs(records)
    engine = "Engine offline, beam 4, float16: nmt-serve against {} in the same run (target tokens/s)"
    tables = [
        (engine.format("CTranslate2"), "| model | batch | nmt-serve | CTranslate2 | ratio | run |",
         engine_table(grouped, "ctranslate2", ENGINE_BATCHES)),
        (engine.format("transformers `generate`"), "| model | batch | nmt-serve | transformers | ratio | run |",
         engine_table(grouped, "transformers", ())),
        ("Served (gRPC, one sentence a request, closed-loop clients) against the offline engine in the same run",
         "| model | clients | served | offline | served / offline | run |", served_table(grouped)),
        ("Exactness: outputs token-identical to transformers' references",
         "| suite | device | precision | search | identical | run |", exactness_table(records)),
    ]
    if not any(rows for _, _, rows in tables):
        sys.exit(f"{folder}: no RESULT line gives a headline figure")
    for title, header, rows in tables:
        if not rows:
            continue
        print(f"**{title}**\n")
        print(header)
        print("|" + "---|" * header.count(" | ") + "---|")
        print("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
