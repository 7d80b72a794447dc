"""The main job: a batched ML-potential simulation of many drug-like molecules in one OpenMM System
(ANI-2x by default, or any model NNPForce takes).

    python -m openmmnnp.simulate [--molecules DIR] [--model NAME|PATH] [--count N] [--steps N] ...

Each XYZ file becomes one batch. The System is energy-minimised, then run with Langevin dynamics on
the fastest platform available (NNPLangevinIntegrator: on CUDA, whole steps replayed from CUDA graphs;
--integrator openmm uses OpenMM's LangevinMiddleIntegrator instead); a progress line shows speed and time left; at the end every
molecule's energy and the speed (ns/day, molecule-steps/s, atom-steps/s) are printed.
"""
import argparse
import glob
import math
import os
import signal
import sys
import time

import openmm
from openmm import unit

# Molecules, MD steps and minimiser iterations that keep a default run near a minute on each platform.
DEFAULTS = {"CUDA": (837, 2000, 500), "CPU": (8, 200, 40), "Reference": (2, 20, 10)}


def sharedDirectory():
    """$NNP_SHARED_DIR, else a 'shared' folder beside any parent of the working directory."""
    env = os.environ.get("NNP_SHARED_DIR")
    if env:
        return env
    here = os.getcwd()
    while True:
        candidate = os.path.join(os.path.dirname(here), "shared")
        if os.path.isdir(os.path.join(candidate, "molecules")):
            return candidate
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def fastestPlatform(requested):
    if requested:
        return openmm.Platform.getPlatformByName(requested)
    names = [openmm.Platform.getPlatform(i).getName() for i in range(openmm.Platform.getNumPlatforms())]
    for name in ("CUDA", "CPU", "Reference"):
        if name in names:
            return openmm.Platform.getPlatformByName(name)
    raise openmm.OpenMMException("no usable OpenMM platform")


BOLTZMANN = 0.00831446261815324  # kJ/mol/K


class Progress:
    """Prints step, percent done, speed, the mean energy per molecule relative to the start of the run
    (per-batch energies in double, whatever the platform's precision), the temperature and the time
    left, at most twice a second."""

    def __init__(self, total, dt, molecules, atoms, e_start):
        self.total, self.dt, self.molecules, self.atoms, self.e_start = total, dt, molecules, atoms, e_start
        self.start = time.perf_counter()
        self.last = 0.0
        self.tty = sys.stderr.isatty()

    def due(self, final=False):
        return final or time.perf_counter() - self.last >= 0.5

    def update(self, step, e_mean, kinetic, final=False):
        now = time.perf_counter()
        self.last = now
        elapsed = now - self.start
        rate = step / elapsed if elapsed > 0 else 0.0
        nsday = rate * self.dt * 86400 / 1e6  # dt in fs
        left = (self.total - step) / rate if rate > 0 else float("nan")
        temperature = 2 * kinetic / (3 * self.atoms * BOLTZMANN)
        line = (f"step {step:>7}/{self.total} {100 * step / self.total:5.1f}%  {nsday:8.3f} ns/day  "
                f"{rate * self.molecules:10.1f} molecule-steps/s  E/molecule {e_mean - self.e_start:+10.3f} kJ/mol "
                f"(from the start)  T {temperature:6.1f} K  {left:6.0f} s left")
        print(("\r" if self.tty else "") + line, end="\n" if final or not self.tty else "", file=sys.stderr, flush=True)


class EnergiesFile:
    """--energies: the CSV, written row by row; a write that fails (a full disk, /dev/full) ends the run
    with a message, and a file this run created is removed if it ends before any row was written."""

    def __init__(self, path, parser):
        self.path, self.rows = path, 0
        self.created = not os.path.exists(path)
        try:
            self.out = open(path, "w")
        except OSError as e:
            parser.error(f"cannot write --energies {path!r}: {e.strerror}")

    def write(self, line, data=True):
        try:
            print(line, file=self.out, flush=True)
        except OSError as e:
            self.abandon()
            sys.exit(f"error: cannot write --energies {self.path!r}: {e.strerror}")
        self.rows += data

    def close(self):
        try:
            self.out.close()
        except OSError as e:
            sys.exit(f"error: cannot write --energies {self.path!r}: {e.strerror}")

    def abandon(self):
        """Closes the file; removes it if this run created it and wrote no row of energies."""
        try:
            self.out.close()
        except OSError:
            pass
        if self.created and self.rows == 0 and os.path.isfile(self.path):
            os.remove(self.path)


class Interrupt:
    """Ctrl-C sets a flag that the minimiser's reporter and the step loop look at, so that the run
    stops within one minimiser iteration or one chunk of steps (a second Ctrl-C stops at once)."""

    def __init__(self):
        self.requested = False
        self.previous = signal.getsignal(signal.SIGINT)

    def __enter__(self):
        def handler(signum, frame):
            if self.requested:
                raise KeyboardInterrupt
            self.requested = True
        signal.signal(signal.SIGINT, handler)
        return self

    def __exit__(self, *exc):
        signal.signal(signal.SIGINT, self.previous)
        return False


def main(argv=None):
    shared = sharedDirectory()
    parser = argparse.ArgumentParser(prog="python -m openmmnnp.simulate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--molecules", help="folder of XYZ files, one molecule each (default: shared/molecules/druglike)")
    parser.add_argument("--model", default="ani2x",
                        help="model: a name (ani2x, ani1x, ani1ccx, or one converted into the cache) or a file: an ANI model "
                        "zoo .info, an .nnpm, a torchmd-net TensorNet .ckpt or ensemble .zip (default: ani2x)")
    parser.add_argument("--count", type=int, help="number of molecules (default: sized for the platform)")
    parser.add_argument("--steps", type=int, help="MD steps (default: sized for the platform)")
    parser.add_argument("--platform", help="OpenMM platform (default: the fastest: CUDA, CPU, Reference)")
    parser.add_argument("--timestep", type=float, default=0.5, help="fs (default 0.5)")
    parser.add_argument("--temperature", type=float, default=300.0, help="K (default 300)")
    parser.add_argument("--friction", type=float, default=1.0, help="1/ps (default 1)")
    parser.add_argument("--minimize", type=int, help="minimiser iterations (default: sized for the platform; 0 skips)")
    parser.add_argument("--energies", help="write per-molecule energies to this CSV file as the run goes")
    parser.add_argument("--energies-interval", type=int, default=100,
                        help="steps between rows of --energies (default 100; the last step is always written)")
    parser.add_argument("--seed", type=int, default=1, help="random seed, 0 .. 2147483647 (default 1; 0: a new one each run)")
    parser.add_argument("--integrator", choices=["nnp", "openmm"], default="nnp",
                        help="nnp: NNPLangevinIntegrator (CUDA graphs on CUDA; default); openmm: LangevinMiddleIntegrator")
    args = parser.parse_args(argv)
    for name, value, low in [("--count", args.count, 1), ("--steps", args.steps, 1), ("--minimize", args.minimize, 0),
                             ("--energies-interval", args.energies_interval, 1)]:
        if value is not None and value < low:
            parser.error(f"{name} must be at least {low}, got {value}")
    if not 0 <= args.seed <= 2**31 - 1:
        parser.error(f"--seed must be in 0 .. 2147483647, got {args.seed}")
    for name, value, positive in [("--timestep", args.timestep, True), ("--temperature", args.temperature, False),
                                  ("--friction", args.friction, False)]:
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            parser.error(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {value}")
    # Open the output first: an unwritable path fails now, not after the minimisation; its header is
    # written (and flushed) as soon as the molecules are known, before the minimisation.
    csv = EnergiesFile(args.energies, parser) if args.energies else None
    try:
        return run(args, csv, shared)
    except BaseException:
        if csv:
            csv.abandon()
        raise


def run(args, csv, shared):
    from . import NNPForce, NNPLangevinIntegrator, createSystemFromXYZ, pluginLoadFailures
    model = args.model
    try:
        found = NNPForce.findModel(model)
    except openmm.OpenMMException as e:
        sys.exit(f"{e}\nPass --model NAME or --model PATH (an ANI model zoo .info file, an .nnpm file, or a "
                 "torchmd-net .ckpt or ensemble .zip).")
    if not os.path.isfile(found):
        sys.exit(f"No model file at {model!r}. Pass --model NAME or --model PATH (an ANI model zoo .info file, "
                 "an .nnpm file, or a torchmd-net .ckpt or ensemble .zip).")
    folder = args.molecules or (shared and os.path.join(shared, "molecules", "druglike"))
    files = sorted(glob.glob(os.path.join(folder, "*.xyz"))) if folder else []
    if not files:
        sys.exit(f"No XYZ files in {folder!r}. Pass --molecules FOLDER (XYZ files, one molecule each), or set "
                 "NNP_SHARED_DIR to the folder that holds molecules/druglike/.")
    platform = fastestPlatform(args.platform)
    count, steps, iterations = DEFAULTS.get(platform.getName(), (4, 100, 20))
    count = min(args.count or count, len(files))
    steps = args.steps if args.steps is not None else steps
    iterations = args.minimize if args.minimize is not None else iterations

    system, topology, positions, force, molecules = createSystemFromXYZ(model, files[:count])
    if csv:
        csv.write("step," + ",".join(m.name for m in molecules), data=False)
    atoms = system.getNumParticles()
    print(f"openmmnnp: {count} molecules ({atoms} atoms) with {force.getModelName()} "
          f"({force.getNumEnsembleMembers()}-member ensemble) on the {platform.getName()} platform", flush=True)
    for failure in pluginLoadFailures():
        if "NNP" in failure:
            print(f"  note: {failure}", file=sys.stderr)
    dt = args.timestep * unit.femtosecond
    if args.integrator == "nnp":
        integrator = NNPLangevinIntegrator(args.temperature * unit.kelvin, args.friction / unit.picosecond, dt)
    else:
        integrator = openmm.LangevinMiddleIntegrator(args.temperature * unit.kelvin, args.friction / unit.picosecond, dt)
    integrator.setRandomNumberSeed(args.seed)
    context = openmm.Context(system, integrator, platform)
    context.setPositions(positions)

    def batch_energies():
        return force.getBatchEnergies(context).value_in_unit(unit.kilojoule_per_mole)

    with Interrupt() as interrupt:
        e0 = context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
        if iterations > 0:
            class StopOnInterrupt(openmm.MinimizationReporter):
                def report(self, iteration, x, grad, args):
                    return interrupt.requested  # True stops the minimiser

            t = time.perf_counter()
            openmm.LocalEnergyMinimizer.minimize(context, 1.0, iterations, StopOnInterrupt())
            if interrupt.requested:
                raise KeyboardInterrupt
            e1 = context.getState(getEnergy=True).getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole)
            print(f"minimised: {e0:.3f} -> {e1:.3f} kJ/mol ({e1 - e0:+.3f}) in {time.perf_counter() - t:.1f} s", flush=True)
        context.setVelocitiesToTemperature(args.temperature * unit.kelvin, args.seed)

        integrator.step(1)  # warm-up outside the timing
        progress = Progress(steps, args.timestep, count, atoms, sum(batch_energies()) / count)
        start = time.perf_counter()
        done = 0
        chunk = max(1, min(100, steps // 20 or 1))
        interval = args.energies_interval
        while done < steps:
            n = min(chunk, steps - done)
            if csv:  # stop at every row of --energies
                n = min(n, interval - done % interval)
            integrator.step(n)
            done += n
            if interrupt.requested:
                raise KeyboardInterrupt
            row = csv and (done % interval == 0 or done == steps)
            if progress.due(final=done == steps) or row:
                energies = batch_energies()
                if progress.due(final=done == steps):
                    kinetic = context.getState(getEnergy=True).getKineticEnergy().value_in_unit(unit.kilojoule_per_mole)
                    progress.update(done, sum(energies) / count, kinetic, final=done == steps)
                if row:
                    csv.write(f"{done}," + ",".join(f"{e:.6f}" for e in energies))
        elapsed = time.perf_counter() - start
    if csv:
        csv.close()

    energies = force.getBatchEnergies(context).value_in_unit(unit.kilojoule_per_mole)
    shown = molecules if len(molecules) <= 20 else molecules[:10] + molecules[-5:]
    print(f"\n{'molecule':<24}{'atoms':>6}{'energy (kJ/mol)':>22}{'energy (Hartree)':>20}")
    for mol in shown:
        k = molecules.index(mol)
        print(f"{mol.name:<24}{len(mol.elements):>6}{energies[k]:>22.4f}{energies[k] / 2625.4996387552483:>20.8f}")
    if len(shown) < len(molecules):
        print(f"... ({len(molecules) - len(shown)} more; --energies FILE writes them all)")
    if args.integrator == "nnp":
        reason = integrator.getFallbackReason() or (
            "CUDA graphs need the CUDA platform" if platform.getName() != "CUDA" else "")
        how = ("whole steps replayed from CUDA graphs" if integrator.isReplayingGraphs() else
               "eager steps" + (f" ({reason})" if reason else ""))
        print(f"\nintegrator: NNPLangevinIntegrator, {how}")
    if steps > 0 and elapsed > 0:
        rate = steps / elapsed
        print(f"\nspeed: {rate * args.timestep * 86400 / 1e6:.4f} ns/day at {args.timestep} fs, {1e6 / rate:.1f} µs/step, "
              f"{rate * count:.1f} molecule-steps/s, {rate * atoms:.0f} atom-steps/s "
              f"({steps} steps in {elapsed:.1f} s, {platform.getName()} platform)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except openmm.OpenMMException as e:
        sys.exit(f"error: {e}")
    except KeyboardInterrupt:
        sys.exit("interrupted")
