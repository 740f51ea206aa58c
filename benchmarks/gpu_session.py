"""``make bench-gpu ARGS="--all"``: every figure of the GPU benchmark within a time budget, most important
first, each written to the results file as soon as it is measured, so that a session cut short keeps what
it measured; a measurement that fails is recorded with its run's own error and the next one runs. Then
:func:`table` turns a results file into BENCHMARKS.md's rows."""

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks import gpu_measures
from benchmarks.gpu_measures import (
    PROFILER,
    concurrent_runs,
    concurrent_runs_mps,
    greedy_validation_seconds,
    host_profile,
    means_overrides,
    mfu_output,
    run_validation_seconds,
    stacked_rows,
    whole_recipe,
)
from nmt.sweep.mps import MpsError, machine_wide_daemon

H100_BF16_PEAK_TFLOPS = 989.0

# the measurements in the order they matter, each with the seconds it needs at least (an H100, compiled
# kernels cached by the runs before it); one that no longer fits the budget is skipped, saying so
SESSION = ["none", "every", "validation", "host", "sharing", "stacked", "mfu", "means", "full"]
SESSION_NEEDS = {
    "none": 40,
    "every": 90,
    "validation": 20,
    "host": 60,
    "sharing": 60,
    "stacked": 90,
    "mfu": 60,
    "means": 60,
    "full": 150,
}


class Session:
    """One method per measurement:

    none        ms per update alone with none of the means (the figure before them)
    every       ms per update alone with every means (after them); while that fails, without the last; with
                the host's time by action (Lightning's simple profiler, in that run)
    validation  greedy validation of the run of ``every`` (and of ``--model``), reading every 1 and 8 steps
    host        the framework's host work per update: train.py against a bare loop, on a micro model
                (benchmarks/host_cost.py), once each
    sharing     aggregate updates per second of 2, 4 and 8 runs (``--runs``) with the means of ``every`` (all
                of them when it did not run in this call), taking turns on the GPU; then the most of them side
                by side under CUDA's MPS
    stacked     1, 4, 8 and 16 tiny models trained stacked in one process (benchmarks/stacked.py): member
                updates per second, against the same models updated one after another; on the fair
                factorial's batches, then on the tiny recipe's
    mfu         the d_model 512 model's MFU
    means       the rows of MEANS between none and every, one by one
    full        the whole tiny recipe with the means of ``every`` (all, if not measured), within the budget left;
                its ms per update, an op-level trace of some updates after its first 300 and of the next
                validation epoch, and the host's time by action after that trace
    """

    def __init__(self, args: argparse.Namespace, results: dict, folder: Path):
        self.args, self.results, self.folder = args, results, folder
        self.started = time.monotonic()
        self.best: list[str] = []  # the overrides of the most means that ran

    def left(self) -> float:
        return self.args.budget - (time.monotonic() - self.started)

    def fits(self, name: str) -> bool:
        return self.left() >= SESSION_NEEDS[name]

    def left_for(self, name: str) -> float:
        """What is left of the budget less the least the chosen measurements after ``name`` need (those that
        could still run in what is left; all of it for a measurement outside the session's order): a slow
        measurement is cut before it takes their time. It may be less than ``name`` needs: then the part of
        it that would run in it is skipped."""
        order = self.results.get("session", {}).get("order", [])
        later = order[order.index(name) + 1 :] if name in order else []
        left = self.left()
        return left - sum(SESSION_NEEDS[n] for n in later if SESSION_NEEDS[n] <= left)

    def skipped(self, name: str) -> dict:
        return {"skipped": f"{self.left():.0f} s of the budget left, at least {SESSION_NEEDS[name]} needed"}

    def fits_before_later(self, name: str) -> bool:
        return self.left_for(name) >= SESSION_NEEDS[name]

    def skipped_for_later(self, name: str) -> dict:
        return {
            "skipped": f"{self.left_for(name):.0f} s of the budget left once the later measurements' least is "
            f"kept, at least {SESSION_NEEDS[name]} needed"
        }

    def alone(self, overrides: list[str], name: str) -> float:
        a = self.args
        rates = concurrent_runs(1, a.device, a.data, a.steps, [*a.extra, *overrides], self.folder / name, self.left())
        return 1000.0 / rates[0]

    def profiled(self, name: str) -> list[dict] | dict:
        """The host's time by action in run ``name`` (run with :data:`~benchmarks.gpu_measures.PROFILER`)."""
        try:
            return host_profile(self.folder / name / "runs1_0.log")
        except (OSError, RuntimeError) as err:
            return {"error": str(err)}

    def none(self) -> dict:
        return {"overrides": means_overrides(1), "ms_per_update": self.alone(means_overrides(1), "none")}

    def every(self) -> dict:
        means = gpu_measures.MEANS
        for rows in range(len(means), 1, -1):  # the last means dropped while one fails
            if rows < len(means) and not self.fits("every"):
                break
            try:  # with the host's time by action: where an update bound by host work spends it
                ms = self.alone([*means_overrides(rows), PROFILER], f"every{rows}")
            except RuntimeError as err:
                self.results[f"every ({means[rows - 1][0]})"] = {"error": str(err)}
                continue
            self.best = means_overrides(rows)
            profile = self.profiled(f"every{rows}")
            return {"overrides": self.best, "ms_per_update": ms, "run": f"every{rows}", "host_profile": profile}
        raise RuntimeError("no row of the means ran (each one's error is beside this)")

    def validation(self) -> dict:
        models = {}
        if "run" in self.results.get("every", {}):
            models[f"trained {self.args.steps} updates"] = self.folder / self.results["every"]["run"] / "runs1_0"
        if self.args.model:
            models["the given model"] = Path(self.args.model)
        if not models:
            raise RuntimeError("no model: measure 'every' first, or give --model")
        timings = self.results["validation"] = {}
        # each step a CUDA graph's replay (nmt/decoding/graphed.py), then step by step, reading which sentences
        # ended every step or every 8; a CPU has no graphs
        gpu = self.args.device == "cuda"
        searches = [("each step a CUDA graph", None, True, False)] if gpu else []
        searches += [(f"step by step, a read every {every}", every, False, False) for every in (1, 8)]
        # the steps' attentions by the written-out formula (benchmarks/attention_kernels.py: one query over a
        # few dozen keys, where the fused kernel may cost more than four small ones)
        searches += [("each step a CUDA graph, the written-out attention", None, True, True)] if gpu else []
        for label, model in models.items():
            translations = {}
            for search, every, graphs, explicit in searches:
                key = f"{label}, {search}"
                try:  # one model failing (a wrong path) leaves the other's figures
                    out = translations[search] = []
                    seconds, sentences = greedy_validation_seconds(
                        model, self.args.device, every, graphs, out, explicit_steps=explicit
                    )
                    timings[key] = {"seconds": seconds, "sentences": sentences}
                except Exception as err:  # noqa: BLE001
                    timings[key] = {"error": f"{type(err).__name__}: {err}"}
                self.write()
            graphed, stepwise = translations.get(searches[0][0]), translations.get(searches[2][0] if gpu else "")
            if gpu and graphed and stepwise:  # the graphs' tokens against the step-by-step search's
                same = sum(a == b for a, b in zip(graphed, stepwise, strict=True))
                timings[f"{label}, the graphs' translations equal to step by step"] = {
                    "same": same,
                    "sentences": len(stepwise),
                }
            written_out = translations.get(searches[-1][0]) if gpu else None
            if graphed and written_out:  # the formula's tokens against the kernel's
                same = sum(a == b for a, b in zip(graphed, written_out, strict=True))
                timings[f"{label}, the written-out attention's translations equal to the kernel's"] = {
                    "same": same,
                    "sentences": len(graphed),
                }
            # on a GPU with the scores in a worker process (its default), in a thread (a CPU's) and inline
            in_run = [
                ("each step a CUDA graph, scores in a process", True, None),
                ("each step a CUDA graph, scores in a thread", True, "thread"),
                ("each step a CUDA graph, scores inline", True, "inline"),
            ]
            for search, graphs, where in in_run * gpu + [("step by step", False, None)]:
                key = f"{label}, as a run validates (Lightning's loop: the loss, the search, the scores), {search}"
                try:
                    seconds, sentences, precision = run_validation_seconds(
                        model, self.args.device, graphs=graphs, scores_in=where
                    )
                    timings[key] = {"seconds": seconds, "sentences": sentences, "precision": precision}
                except Exception as err:  # noqa: BLE001
                    timings[key] = {"error": f"{type(err).__name__}: {err}"}
                self.write()
        return timings

    def host(self) -> dict:
        from benchmarks.host_cost import measure

        return measure(self.args.device, repeats=1, table=False, timeout=max(self.left() / 2 - 10, 10))

    def sharing(self) -> dict:
        # the means of 'every' when it ran in this call, else all of them on a GPU (as 'full'; on a CPU, whose
        # runs cannot record CUDA graphs, none), then --sharing-with: the runs' overrides are written beside
        # their figures
        a = self.args
        overrides = self.best or (means_overrides() if a.device == "cuda" else means_overrides(1))
        overrides = [*overrides, *getattr(a, "sharing_with", [])]
        shared = self.results["sharing"] = {"overrides": overrides}
        most = max([n for n in a.runs if n > 1], default=0)
        mps_after = bool(most) and a.device == "cuda"
        for n in sorted({n for n in a.runs if n > 1}):
            if not self.fits_before_later("sharing"):
                shared[f"runs_{n}"] = self.skipped_for_later("sharing")
                continue
            # the most runs under MPS come after: taking turns leaves them half of what is left
            budget = self.left_for("sharing") / (2 if mps_after and n == most else 1)
            try:
                folder = self.folder / f"sharing{n}"
                rates = concurrent_runs(n, a.device, a.data, a.steps, [*a.extra, *overrides], folder, budget)
                shared[f"runs_{n}"] = {"updates_per_s_each": rates, "updates_per_s_total": sum(rates)}
            except RuntimeError as err:
                shared[f"runs_{n}"] = {"error": str(err)}
            self.write()
        if a.device == "cuda" and machine_wide_daemon():
            shared["machine_wide_mps"] = "a daemon answers at /tmp/nvidia-mps: the runs above may have run under MPS"
        if mps_after:  # MPS is CUDA's; on a CPU there are no turns to remove
            fits = self.fits_before_later("sharing")
            shared[f"runs_{most}_mps"] = (
                self.sharing_mps(most, overrides) if fits else self.skipped_for_later("sharing")
            )
            self.write()
        return shared

    def sharing_mps(self, n: int, overrides: list[str]) -> dict:
        """n runs side by side under MPS."""
        a = self.args
        try:
            rates, seen = concurrent_runs_mps(
                n,
                a.device,
                a.data,
                a.steps,
                [*a.extra, *overrides],
                self.folder / f"sharing{n}_mps",
                self.left_for("sharing"),
            )
        except (MpsError, RuntimeError) as err:
            return {"error": str(err)}
        result = {"updates_per_s_each": rates, "updates_per_s_total": sum(rates), "mps": seen}
        if not seen["servers_seen"]:
            result["error"] = "no MPS server appeared: the runs did not reach the daemon (they took turns)"
        elif seen["most_clients_at_once"] is not None and seen["most_clients_at_once"] < n:  # None: not listed
            result["error"] = f"at most {seen['most_clients_at_once']} of the {n} runs were seen connected at once"
        return result

    def stacked(self) -> dict:
        a = self.args
        # the models of the runs measured (experiment=...), or the tiny recipe's where no override is given
        config = [f"data={a.data}", *a.extra] if a.extra else None
        rows, stopped = stacked_rows(a.device, self.left_for("stacked"), config)
        if not rows:
            raise RuntimeError(f"benchmarks.stacked measured nothing: {stopped}")
        return {"rows": rows, **({"error": stopped} if stopped else {})}

    def mfu(self) -> dict:
        output = mfu_output(self.args.device, self.left())
        rows = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
        measured = [r for r in rows if "model_tflops" in r]
        if not measured:
            raise RuntimeError(f"benchmarks.mfu printed no result: {rows[-1]['error'] if rows else output[-2000:]}")
        row = measured[-1]
        return {**row, "mfu_of_989_tflops_percent": round(100 * row["model_tflops"] / H100_BF16_PEAK_TFLOPS, 2)}

    def means(self) -> dict:
        measured = self.results["means"] = {}
        for rows in range(2, len(gpu_measures.MEANS)):
            label = gpu_measures.MEANS[rows - 1][0]
            if not self.fits("means"):
                measured[label] = self.skipped("means")
                continue
            try:
                measured[label] = {"ms_per_update": self.alone(means_overrides(rows), f"means{rows}")}
            except RuntimeError as err:
                measured[label] = {"error": str(err)}
            self.write()
        return measured

    def full(self) -> dict:
        # every means unless 'every' found one failing, then the whole recipe's own (--full-with)
        overrides = [*(self.best or means_overrides()), *getattr(self.args, "full_with", [])]
        a = self.args
        # with the op-level trace after its first 300 updates, then the host's profile: a whole run's steady
        # state; unprofiled, the wall time a user's run pays
        profiled = not getattr(a, "full_unprofiled", False)
        extra = [*a.extra, *overrides, *([PROFILER] if profiled else [])]
        run = whole_recipe(a.device, a.data, extra, self.folder / "full", self.left())
        return {**run, "overrides": overrides, "profiled": profiled}

    def write(self) -> None:
        write_results(self.args.json, self.results)

    def run(self) -> dict:
        chosen = [name for name in SESSION if not self.args.only or name in self.args.only]
        self.results["session"] = {"budget_s": self.args.budget, "order": chosen}
        for name in chosen:
            if name == "mfu" and self.args.device != "cuda":  # a d_model 512 model against an H100's peak
                self.results[name] = {"skipped": "a GPU's figure (python -m benchmarks.mfu --device cpu: a CPU's)"}
            elif not self.fits(name):
                self.results[name] = self.skipped(name)
            else:
                began = time.monotonic()
                try:
                    self.results[name] = getattr(self, name)()
                except Exception as err:  # noqa: BLE001 - one measurement failing leaves the others to run
                    self.results[name] = {**self.results.get(name, {}), "error": f"{type(err).__name__}: {err}"}
                self.results[name]["wall_s"] = round(time.monotonic() - began, 1)
            print(f"{name}: {json.dumps(self.results[name])}", flush=True)
            self.write()
        return self.results


def write_results(path: str | None, results: dict) -> None:
    if path:  # atomically, so that a session killed while writing leaves the last complete results
        target = Path(path)
        partial = target.with_suffix(target.suffix + ".partial")
        partial.parent.mkdir(parents=True, exist_ok=True)  # as --json's check said: its folders are made
        partial.write_text(json.dumps(results, indent=1) + "\n")
        os.replace(partial, target)


def table(results: dict) -> str:
    """A results file of ``--all`` as the Markdown table of BENCHMARKS.md: one row per figure, a failed or
    skipped measurement with its reason."""
    rows = [f"| measurement ({results.get('device')}, torch {results.get('torch')}) | result |", "|---|---|"]

    def row(what: str, value: str) -> None:
        cells = (" ".join(cell.split()).replace("|", "\\|") for cell in (what, value))  # a cell is one line
        rows.append("| {} | {} |".format(*cells))

    def reason(entry: dict) -> str:
        if "error" in entry:
            return f"failed: {entry['error']}"
        return f"skipped: {entry['skipped']}" if "skipped" in entry else "not measured (the session ended first)"

    def profile_rows(profile, of: str) -> None:
        if isinstance(profile, dict):
            row(f"host time by action{of} (Lightning's simple profiler)", reason(profile))
        for action in profile if isinstance(profile, list) else []:
            row(
                f"host time{of}, {action['action']}",
                f"{action['ms_per_call']:.2f} ms a call, {action['calls']} calls, {action['total_s']:.1f} s",
            )

    def trace_rows(trace, of: str) -> None:
        if not isinstance(trace, dict) or "error" in trace:
            if trace is not None:
                row(f"op-level trace{of} (torch.profiler)", reason(trace or {}))
            return
        for part, t in trace.items():
            if not isinstance(t, dict):  # a fact beside the parts (when the simple profiler was cleared)
                continue
            row(
                f"op-level trace{of}, {part}, per {t['unit']}",
                f"{t['wall_ms_per_unit']:.1f} ms; {t['operator_calls_per_unit']:.0f} operator calls, "
                f"{t['kernel_launches_per_unit']:.0f} kernel and {t['graph_launches_per_unit']:.0f} graph launches, "
                f"{t['copies_per_unit']:.1f} copies, {t['host_waits_ms_per_unit']:.1f} ms of host waits, device busy "
                f"{t['device_busy_ms_per_unit']:.2f} ms (over {t['units']})",
            )
            for key, unit_ms, what in (
                ("top_kernels", "device_ms_per_unit", "kernels by device time"),
                ("top_host_operators", "host_ms_per_unit", "operators by host time"),
            ):
                if t.get(key):  # traces from before these lists, and a CPU's kernels, have none
                    listed = "; ".join(
                        f"`{e['name']}` {e[unit_ms]:.2f} ms ({e['calls_per_unit']:.1f} calls)" for e in t[key][:8]
                    )
                    row(f"op-level trace{of}, {part}, {what} per {t['unit']}", listed)

    for name in results.get("session", {}).get("order", []):
        entry = results.get(name, {})
        if name in ("none", "every"):
            for key, failed in results.items():
                if key.startswith(f"{name} ("):
                    row(f"update alone, {key[len(name) + 2 : -1]}", reason(failed))
            what = "update alone, " + ("none of the means" if name == "none" else "every means that ran")
            if "ms_per_update" in entry:
                row(f"{what} (`{' '.join(entry['overrides'])}`)", f"{entry['ms_per_update']:.1f} ms")
            else:
                row(what, reason(entry))
            profile_rows(entry.get("host_profile"), "")
        elif name == "validation":
            timings = {k: v for k, v in entry.items() if isinstance(v, dict)}
            for label, t in timings.items():
                value = f"{t['seconds']:.2f} s ({t['sentences']} sentences)" if "seconds" in t else reason(t)
                if "same" in t:
                    value = f"{t['same']} of {t['sentences']}"
                row(f"greedy validation, {label}", value)
            if not timings or "error" in entry:
                row("greedy validation", reason(entry))
        elif name == "host":
            if "framework_host_ms_per_update" in entry:
                row(
                    "the framework's host work per update (micro model: `train.py` less a bare loop)",
                    f"{entry['framework_host_ms_per_update']:.2f} ms ({entry['train_py_ms_per_update']:.2f} against "
                    f"{entry['bare_loop_ms_per_update']:.2f} ms, {entry['updates_timed'][0]} updates)",
                )
            else:
                row("the framework's host work per update", reason(entry))
        elif name == "sharing":
            if entry.get("overrides"):
                row("runs sharing the device, their overrides", f"`{' '.join(entry['overrides'])}`")
            runs = {k: v for k, v in entry.items() if k.startswith("runs_")}
            for key, r in runs.items():
                if "updates_per_s_total" in r and "error" not in r:
                    each = ", ".join(f"{x:.1f}" for x in r["updates_per_s_each"])
                    value = f"{r['updates_per_s_total']:.1f} updates/s in all ({each})"
                else:
                    value = reason(r)
                n, _, mps = key[5:].partition("_")
                how = "side by side under MPS" if mps else "taking turns"
                row(f"{n} runs sharing the device, {how}", value)
            if not runs or "error" in entry:
                row("runs sharing the device", reason(entry))
            if "machine_wide_mps" in entry:
                row("runs sharing the device, taking turns", f"caveat: {entry['machine_wide_mps']}")
        elif name == "stacked":
            for r in entry.get("rows", []):
                what = f"{r['members']} tiny model(s) {r['way']} in one process, batches of {r.get('batch', '?')}" + (
                    ", each update one graph" if r.get("graph") else ""
                )
                if r.get("model"):
                    what += f" ({r['model']})"
                value = (
                    f"{r['member_updates_per_s']} member updates/s ({r['step_ms']} ms an update of all)"
                    if "step_ms" in r
                    else f"failed: {r['error']}"
                )
                if r.get("vmap_looped_ops"):
                    value += f"; run member by member: {', '.join(r['vmap_looped_ops'])}"
                row(what, value)
            if not entry.get("rows") or "error" in entry:
                row("tiny models stacked in one process", reason(entry))
        elif name == "mfu":
            if "mfu_percent" in entry:
                row(
                    f"MFU, d_model 512 6+6, bf16, {entry['compile']} compiled, batch {entry['batch']}",
                    f"{entry['mfu_of_989_tflops_percent']}% of 989 TFLOP/s ({entry['model_tflops']} TFLOP/s, "
                    f"{entry['mfu_percent']}% of the {entry['gemm_peak_tflops']} TFLOP/s measured alongside; "
                    f"{entry['step_ms']} ms a step)",
                )
            else:
                row("MFU, d_model 512 6+6", reason(entry))
        elif name == "means":
            for label, m in entry.items():
                if isinstance(m, dict):
                    value = f"{m['ms_per_update']:.1f} ms" if "ms_per_update" in m else reason(m)
                    row(f"update alone, the means up to '{label}'", value)
            if "error" in entry or not any(isinstance(m, dict) for m in entry.values()):
                row("the means one by one", reason(entry))
        elif name == "full":
            if "updates" in entry:
                cut = ", cut short by the budget" if entry.get("cut_short_by_cap") else ""
                ms = f", {entry['ms_per_update']:.1f} ms an update" if entry.get("ms_per_update") else ""
                row(
                    f"whole recipe (`{' '.join(entry['overrides'])}`"
                    f"{', profilers on' if entry.get('profiled', True) else ', no profiler'})",
                    f"{entry['wall_s'] / 60:.1f} min, {entry['updates']} updates{ms}, best validation BLEU "
                    f"{entry['best_val_bleu']}, test BLEU {entry['test_bleu']}{cut}",
                )
                parts = entry.get("wall_parts")
                if isinstance(parts, dict) and "error" not in parts:
                    epoch = parts["epoch_s_median_later_half"]
                    row(
                        "whole recipe, where its time went",
                        f"{parts['before_training_s']:.1f} s before training, {parts['first_epoch_s']:.1f} s its first "
                        f"epoch (the compile in it), {'-' if epoch is None else f'{epoch:.2f}'} s an epoch later on, "
                        f"{parts['final_scores_s']:.1f} s the final scores",
                    )
                elif parts is not None:
                    row("whole recipe, where its time went", reason(parts))
                profile_rows(entry.get("host_profile"), " in the whole recipe")
                trace_rows(entry.get("trace"), " in the whole recipe")
            else:
                row("whole recipe", reason(entry))
    return "\n".join(rows)


if __name__ == "__main__":  # a library: run as a program, it measured nothing and said nothing
    raise SystemExit(
        "benchmarks.gpu_session is a part of `python -m benchmarks.gpu`: run that (--help lists its options)"
    )
