import os

import pytest

SHARED = os.environ.get("NNP_SHARED_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared")
ANI1X = os.path.join(SHARED, "models", "ani-model-zoo", "ani-1x_8x.info")
ANI2X = os.path.join(SHARED, "models", "ani-model-zoo", "ani-2x_8x.info")
EXAMPLES = os.environ.get("NNP_EXAMPLES_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "examples")
DRUGS = os.path.join(SHARED, "molecules", "druglike")
HARTREE = 2625.4996387552483


def drug(name):
    return os.path.join(DRUGS, f"drugbank-{name}.xyz")


@pytest.fixture(params=["Reference", "CPU"])
def platform(request):
    import openmm
    return openmm.Platform.getPlatformByName(request.param)


def solvated_dipeptide(box=2.2):
    """Alanine dipeptide (examples/alanine-dipeptide.pdb) in a cubic box of TIP3P-FB water, for
    Amber14: (forcefield, topology, positions)."""
    import openmm
    from openmm import app, unit
    pdb = app.PDBFile(os.path.join(EXAMPLES, "alanine-dipeptide.pdb"))
    forcefield = app.ForceField("amber14-all.xml", "amber14/tip3pfb.xml")
    modeller = app.Modeller(pdb.topology, pdb.positions)
    modeller.addSolvent(forcefield, boxSize=openmm.Vec3(box, box, box) * unit.nanometer)
    return forcefield, modeller.topology, modeller.positions
