"""FIXTURE training script for compat tune's tests (tests/tune/test_tune_hostile.py): no torch. It speaks compat tune's
protocol (a {'loss': X} line per step, then {'train_steps_per_second': Y}) and, like an HF Trainer script ending in
save_model(), writes a model file into every output folder it is given. --spew-mib N first prints N MiB of other output
(a chatty script); --sleep S sleeps S seconds at the end (a run to kill)."""

import argparse
import os

parser = argparse.ArgumentParser()
for name in ("--output_dir", "--logging_dir", "--save_dir", "--outdir", "--data_dir", "--cache_dir"):
    parser.add_argument(name)
parser.add_argument("--max_steps", type=int, default=int(os.environ.get("COMPAT_TUNE_STEPS") or 3))
parser.add_argument("--spew-mib", type=int, default=0)
parser.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep after printing (a run to kill)")
args, _ = parser.parse_known_args()
line = "x" * 1023 + "\n"
for _ in range(args.spew_mib * 1024):
    print(line, end="")
for step in range(args.max_steps):
    print({"loss": round(1.0 / (step + 1), 4)})
print({"train_steps_per_second": 10.0}, flush=True)
for folder in (args.output_dir, args.logging_dir, args.save_dir, args.outdir):
    if folder:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "model.bin"), "w") as handle:
            handle.write("written by a compat tune run\n")
if args.sleep:
    import time

    time.sleep(args.sleep)
