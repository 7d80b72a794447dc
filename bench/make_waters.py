"""Writes the water systems of the TensorNet benchmarks as XYZ files (Å), numpy only:
  water-cluster-N.xyz  a cluster of N waters: the N sites nearest the centre of a cubic lattice at
                       liquid density (3.104 Å apart: 0.0334 waters per Å³)
  water-box-M.xyz      a periodic cubic box of M³ waters on that lattice (Lattice= in the comment line)
Each water is O at its site and two H at 0.9572 Å, 104.52° apart, in a seeded random orientation.
    python bench/make_waters.py OUT_DIR [CLUSTER_WATERS (258)] [BOX_SIDE_WATERS (12: 5,184 atoms)]"""
import os
import sys

import numpy as np

SPACING = 3.104  # Å: (1 / 0.0334)^(1/3)
OH, HALF_ANGLE = 0.9572, np.radians(104.52 / 2)


def rotation(rng):
    q, r = np.linalg.qr(rng.standard_normal((3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


def waters(sites, rng):
    local = np.array([[0, 0, 0], [OH * np.sin(HALF_ANGLE), OH * np.cos(HALF_ANGLE), 0],
                      [-OH * np.sin(HALF_ANGLE), OH * np.cos(HALF_ANGLE), 0]])
    return np.vstack([site + local @ rotation(rng).T for site in sites])


def write(path, pos, lattice=None):
    with open(path, "w") as f:
        f.write(f"{len(pos)}\n")
        f.write(f'Lattice="{lattice} 0 0 0 {lattice} 0 0 0 {lattice}" Properties=species:S:1:pos:R:3\n' if lattice else "water\n")
        for k, p in enumerate(pos):
            f.write(f"{'O' if k % 3 == 0 else 'H'} {p[0]:.6f} {p[1]:.6f} {p[2]:.6f}\n")


def main():
    if len(sys.argv) not in (2, 3, 4):
        sys.exit(__doc__)
    out = sys.argv[1]
    n_cluster = int(sys.argv[2]) if len(sys.argv) > 2 else 258
    side = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(2026)
    m = int(np.ceil(n_cluster ** (1 / 3))) + 3
    grid = np.array([(a, b, c) for a in range(m) for b in range(m) for c in range(m)], float) * SPACING
    centre = grid.mean(0)
    order = np.lexsort((np.arange(len(grid)), np.linalg.norm(grid - centre, axis=1)))
    write(os.path.join(out, f"water-cluster-{n_cluster}.xyz"), waters(grid[order[:n_cluster]] - centre, rng))
    box = np.array([(a, b, c) for a in range(side) for b in range(side) for c in range(side)], float) * SPACING + SPACING / 2
    write(os.path.join(out, f"water-box-{side}.xyz"), waters(box, rng) % (side * SPACING), lattice=f"{side * SPACING:.6f}")


if __name__ == "__main__":
    main()
