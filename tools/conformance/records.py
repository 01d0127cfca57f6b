"""Writing the JSON and JSONL files, and the versions every meta.json records."""
import json
import sys


def write_json(path, obj, indent=1, sort_keys=True):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=indent, sort_keys=sort_keys)
        f.write("\n")


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def versions():
    import sentencepiece
    import torch
    import transformers

    return {"transformers": transformers.__version__, "torch": torch.__version__,
            "sentencepiece": sentencepiece.__version__, "python": sys.version.split()[0]}
