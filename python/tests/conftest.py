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
