"""ML/MM with OpenMM-ML and openmm-nnp: alanine dipeptide (ANI-2x) in water (Amber14, TIP3P-FB, PME).

    python examples/mlmm.py [--platform CUDA] [--integrator nnp|openmm] [--steps N] [--padding NM]
                            [--model ani2x-nnp] [--interpolate] [--compare-mm]

The peptide is modelled with the ML potential, the water with the force field, and the peptide-water
interactions with the force field's charges and Lennard-Jones terms (OpenMM-ML's mechanical
embedding): the only change from an OpenMM-ML script that uses its own "ani2x" is the name
"ani2x-nnp". The System is minimised, equilibrated briefly, then run with Langevin dynamics (1 fs,
300 K); the speed is printed in µs per step and ns/day. --compare-mm also runs the same System with
the peptide left to Amber14: the cost of going ML/MM. --interpolate builds the System with
interpolate=True (a global parameter lambda_interpolate between MM, 0, and ML/MM, 1).

On CUDA, NNPLangevinIntegrator replays whole steps from CUDA graphs only when every force can be
recorded; PME cannot (OpenMM rebuilds its neighbour list with host synchronisation), so here it
runs the same kernels eagerly and says why once on stderr (docs/openmmml.md).
"""
import argparse
import os
import sys
import time

import openmm
from openmm import app, unit

import openmmnnp
from openmmml import MLPotential

HERE = os.path.dirname(os.path.abspath(__file__))


def build(padding):
    """The solvated dipeptide: Topology, positions, MM System, indices of the peptide's atoms."""
    pdb = app.PDBFile(os.path.join(HERE, "alanine-dipeptide.pdb"))
    forcefield = app.ForceField("amber14-all.xml", "amber14/tip3pfb.xml")
    modeller = app.Modeller(pdb.topology, pdb.positions)
    modeller.addSolvent(forcefield, padding=padding * unit.nanometer)
    mm = forcefield.createSystem(modeller.topology, nonbondedMethod=app.PME, nonbondedCutoff=0.9 * unit.nanometer,
                                 constraints=app.HBonds)
    peptide = [atom.index for atom in modeller.topology.atoms() if atom.residue.name in ("ACE", "ALA", "NME")]
    return modeller.topology, modeller.positions, mm, peptide


def makeIntegrator(kind, temperature=300 * unit.kelvin, friction=1 / unit.picosecond, dt=1 * unit.femtoseconds):
    if kind == "nnp":
        return openmmnnp.NNPLangevinIntegrator(temperature, friction, dt)
    return openmm.LangevinMiddleIntegrator(temperature, friction, dt)


def run(label, system, positions, platform, kind, steps, report):
    """Minimises, equilibrates 100 steps, then times `steps` steps. Returns µs per step."""
    integrator = makeIntegrator(kind)
    integrator.setRandomNumberSeed(1)
    context = openmm.Context(system, integrator, platform)
    context.setPositions(positions)
    openmm.LocalEnergyMinimizer.minimize(context, 10.0, 200)
    context.setVelocitiesToTemperature(300 * unit.kelvin, 1)
    integrator.step(100)
    context.getState(getEnergy=True)
    dof = sum(3 for i in range(system.getNumParticles()) if system.getParticleMass(i) > 0 * unit.dalton)
    dof -= system.getNumConstraints() + 3 * any(isinstance(f, openmm.CMMotionRemover) for f in system.getForces())
    chunk = max(1, steps // 10)
    start = time.perf_counter()
    done = 0
    while done < steps:
        n = min(chunk, steps - done)
        integrator.step(n)
        done += n
        if report:
            state = context.getState(getEnergy=True)
            kelvin = 2 * state.getKineticEnergy() / (dof * unit.MOLAR_GAS_CONSTANT_R)
            print(f"  {label}: step {done:6d}  potential {state.getPotentialEnergy().value_in_unit(unit.kilojoule_per_mole):14.2f} kJ/mol"
                  f"  {kelvin.value_in_unit(unit.kelvin):6.1f} K", flush=True)
    context.getState(getEnergy=True)  # waits for the GPU
    elapsed = time.perf_counter() - start
    if report:  # reporting costs time: measure again without it
        start = time.perf_counter()
        integrator.step(steps)
        context.getState(getEnergy=True)
        elapsed = time.perf_counter() - start
    usPerStep = elapsed / steps * 1e6
    nsPerDay = 86400 / (usPerStep * 1e-6) * 1e-6  # 1 fs steps: steps/day × 1e-6 ns
    extra = ""
    if isinstance(integrator, openmmnnp.NNPGraphIntegrator) and platform.getName() == "CUDA":
        extra = "  graphs" if integrator.isReplayingGraphs() else "  eager (" + integrator.getFallbackReason().split(":")[0] + ")"
    print(f"{label:32s} {usPerStep:10.1f} µs/step  {nsPerDay:8.2f} ns/day{extra}", flush=True)
    return usPerStep


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platform", help="OpenMM platform (default: CUDA if available, else CPU)")
    parser.add_argument("--integrator", choices=["nnp", "openmm", "both"], default="nnp",
                        help="NNPLangevinIntegrator, OpenMM's LangevinMiddleIntegrator, or both (default: nnp)")
    parser.add_argument("--steps", type=int, help="timed MD steps of 1 fs (default: 2000 on CUDA, 50 elsewhere)")
    parser.add_argument("--padding", type=float, default=1.0, help="water around the peptide, nm (default 1.0)")
    parser.add_argument("--model", default="ani2x-nnp", help="OpenMM-ML potential (default ani2x-nnp)")
    parser.add_argument("--interpolate", action="store_true", help="createMixedSystem(interpolate=True)")
    parser.add_argument("--compare-mm", action="store_true", help="also run the peptide with Amber14 (MM only)")
    args = parser.parse_args(argv)

    names = [openmm.Platform.getPlatform(i).getName() for i in range(openmm.Platform.getNumPlatforms())]
    name = args.platform or ("CUDA" if "CUDA" in names else "CPU")
    if name not in names:
        parser.error(f"platform {name} is not available here (available: {', '.join(names)}); "
                     f"python -m openmmnnp.selfcheck says why a plugin did not load")
    if args.padding <= 0:
        parser.error("--padding must be > 0")
    steps = args.steps if args.steps is not None else (2000 if name == "CUDA" else 50)
    if steps < 1:
        parser.error("--steps must be >= 1")
    platform = openmm.Platform.getPlatformByName(name)
    if name == "CUDA":
        platform.setPropertyDefaultValue("Precision", "mixed")

    topology, positions, mm, peptide = build(args.padding)
    box = min(topology.getPeriodicBoxVectors()[i][i].value_in_unit(unit.nanometer) for i in range(3))
    if box < 1.8:
        parser.error(f"--padding {args.padding} gives a {box:.2f} nm box, less than twice the 0.9 nm cutoff")
    potential = MLPotential(args.model)
    start = time.perf_counter()
    mixed = potential.createMixedSystem(topology, mm, peptide, interpolate=args.interpolate)
    print(f"{topology.getNumAtoms()} atoms ({len(peptide)} with {args.model}, {topology.getNumResidues() - 3} waters), "
          f"box {topology.getPeriodicBoxVectors()[0][0].value_in_unit(unit.nanometer):.2f} nm, PME; "
          f"createMixedSystem {time.perf_counter() - start:.1f} s; platform {name}; {steps} steps of 1 fs", flush=True)
    kinds = ["nnp", "openmm"] if args.integrator == "both" else [args.integrator]
    label = {"nnp": "NNPLangevinIntegrator", "openmm": "LangevinMiddleIntegrator"}
    results = {}
    for kind in kinds:
        results["ML/MM", kind] = run(f"ML/MM, {label[kind]}", mixed, positions, platform, kind, steps, report=len(results) == 0)
    if args.compare_mm:
        for kind in kinds:
            results["MM", kind] = run(f"MM only, {label[kind]}", mm, positions, platform, kind, steps, report=False)
        for kind in kinds:
            print(f"ML/MM costs {results['ML/MM', kind] / results['MM', kind]:.1f}x the MM step with {label[kind]}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except openmm.OpenMMException as e:
        sys.exit(f"error: {e}")
