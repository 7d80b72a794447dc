"""Setup time for many replicas of one molecule: building the System (NNPForce.addAtoms) and creating
the Context, per platform. A benchmark (printed, not asserted): the time per replica should stay flat
as the number of replicas grows.

    python bench/replica_setup.py [--platform CPU] [--replicas 1000 10000 100000] [--energy] [--molecule FILE.xyz]
"""
import argparse
import os
import sys
import time

import openmm
from openmm import unit

import openmmnnp


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--platform", default="CPU")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--model", default="ani1x")
    parser.add_argument("--energy", action="store_true", help="also time the first energy evaluation")
    parser.add_argument("--molecule", help="XYZ file (default: drugbank-0030 of the shared molecules, 22 atoms)")
    args = parser.parse_args(argv)
    shared = os.environ.get("NNP_SHARED_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "shared")
    mol = openmmnnp.readXYZ(args.molecule or os.path.join(shared, "molecules", "druglike", "drugbank-0030.xyz"))
    platform = openmm.Platform.getPlatformByName(args.platform)
    elements = [e.atomic_number for e in mol.elements]
    xyz = mol.positions.value_in_unit(unit.nanometer)
    n = len(elements)
    print(f"{args.platform}: replicas of {mol.name} ({n} atoms, {args.model})")
    print(f"{'replicas':>10} {'atoms':>10} {'System (s)':>11} {'Context (s)':>12} {'first energy (s)':>17} {'µs/replica':>11}")
    for replicas in args.replicas:
        start = time.perf_counter()
        system = openmm.System()
        for _ in range(replicas):
            for e in mol.elements:
                system.addParticle(e.mass)
        force = openmmnnp.NNPForce(args.model)
        force.addAtoms(range(replicas * n), elements * replicas, [b for b in range(replicas) for _ in range(n)])
        system.addForce(force)
        side = int(replicas ** (1 / 3)) + 1
        positions = [p + openmm.Vec3(b % side, (b // side) % side, b // (side * side)) * 1.5
                     for b in range(replicas) for p in xyz]
        built = time.perf_counter()
        context = openmm.Context(system, openmm.VerletIntegrator(0.0005), platform)
        created = time.perf_counter()
        context.setPositions(positions)
        if args.energy:
            context.getState(getEnergy=True)
        evaluated = time.perf_counter()
        first = f"{evaluated - created:.2f}" if args.energy else "-"
        print(f"{replicas:>10,} {replicas * n:>10,} {built - start:>11.2f} {created - built:>12.2f} "
              f"{first:>17} {(created - built) / replicas * 1e6:>11.1f}", flush=True)
        del context
    return 0


if __name__ == "__main__":
    sys.exit(main())
