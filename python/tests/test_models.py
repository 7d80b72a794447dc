"""Models by name: each search place, precedence, missing names, unreadable files, names that are paths."""
import os
import subprocess
import sys

import openmm
import pytest

import openmmnnp
from openmmnnp import models
from conftest import ANI1X


@pytest.fixture
def places(tmp_path, monkeypatch):
    """An empty NNP_MODEL_PATH folder pair and an empty per-user cache; the installed models stay."""
    first, second, cache = tmp_path / "first", tmp_path / "second", tmp_path / "xdg"
    for folder in (first, second, cache / "openmm-nnp" / "models"):
        folder.mkdir(parents=True)
    monkeypatch.setenv("NNP_MODEL_PATH", f"{first}:{second}")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return first, second, cache / "openmm-nnp" / "models"


def installed_folder():
    return openmmnnp.NNPForce.getModelSearchPath()[-1]


def put(folder, name):
    """A model file under a name (a link to a converted ANI-1x)."""
    target = folder / f"{name}.nnpm"
    os.symlink(openmmnnp.NNPForce.findModel("ani1x"), target)
    return str(target)


def test_search_path_order(places):
    first, second, cache = places
    path = openmmnnp.NNPForce.getModelSearchPath()
    assert path[:3] == [str(first), str(second), str(cache)]
    assert models.cacheFolder() == str(cache)
    assert path[3].endswith(os.path.join("share", "openmm-nnp", "models")) and len(path) == 4


def converted(source, folder):
    """The .nnpm bytes of a model, converted afresh."""
    target = folder / "fresh.nnpm"
    openmmnnp.NNPForce.convertModel(source, str(target))
    data = target.read_bytes()
    target.unlink()
    return data


def test_installed_models_by_name(places, tmp_path):
    """With nothing in NNP_MODEL_PATH or the cache, names resolve to the installed models (the
    openmm-nnp-models wheel, or the build tree's converted copies) and match the model zoo."""
    for name, zoo_name in (("ani1x", "ani-1x_8x"), ("ani1ccx", "ani-1ccx_8x"), ("ani2x", "ani-2x_8x")):
        found = openmmnnp.NNPForce.findModel(name)
        assert found == os.path.join(installed_folder(), f"{name}.nnpm")
        assert openmmnnp.NNPForce(name).getModelName() == zoo_name
        with open(found, "rb") as f:
            assert f.read() == converted(os.path.join(os.path.dirname(ANI1X), zoo_name + ".info"), tmp_path)
    assert openmmnnp.NNPForce("ani1x").getModelPath() == "ani1x"


def test_precedence(places):
    first, second, cache = places
    in_cache = put(cache, "mine")
    assert openmmnnp.NNPForce.findModel("mine") == in_cache
    in_second = put(second, "mine")
    assert openmmnnp.NNPForce.findModel("mine") == in_second
    in_first = put(first, "mine")
    assert openmmnnp.NNPForce.findModel("mine") == in_first
    # NNP_MODEL_PATH and the cache come before the installed models.
    assert openmmnnp.NNPForce.findModel("ani2x").startswith(installed_folder())
    shadow = put(cache, "ani2x")
    assert openmmnnp.NNPForce.findModel("ani2x") == shadow
    assert openmmnnp.NNPForce("ani2x").getModelName() == "ani-1x_8x"


def test_missing_name_says_where_and_how(places):
    first, second, cache = places
    with pytest.raises(openmm.OpenMMException) as error:
        openmmnnp.NNPForce("ani9z")
    message = str(error.value)
    assert "model 'ani9z' not found" in message
    for folder in (first, second, cache, installed_folder()):
        assert os.path.join(str(folder), "ani9z.nnpm") in message
    assert "pip install openmm-nnp-models" in message and "python -m openmmnnp.models install" in message


def test_missing_name_without_model_path(places, monkeypatch):
    monkeypatch.delenv("NNP_MODEL_PATH")
    with pytest.raises(openmm.OpenMMException, match="NNP_MODEL_PATH \\(not set\\)"):
        openmmnnp.NNPForce.findModel("ani9z")


def test_unreadable_match_is_an_error_not_skipped(places):
    first, second, cache = places
    (first / "ani2x.nnpm").mkdir()
    with pytest.raises(openmm.OpenMMException, match="ani2x.nnpm is not a regular file"):
        openmmnnp.NNPForce("ani2x")
    (first / "ani2x.nnpm").rmdir()
    (second / "ani2x.nnpm").write_bytes(b"NNPMODEL garbage")
    with pytest.raises(openmm.OpenMMException, match=str(second / "ani2x.nnpm")):
        openmmnnp.NNPForce("ani2x")
    if os.geteuid() != 0:  # root reads any file
        locked = first / "locked.nnpm"
        locked.write_bytes(b"x")
        locked.chmod(0)
        with pytest.raises(openmm.OpenMMException, match="cannot be read"):
            openmmnnp.NNPForce.findModel("locked")


def test_names_that_are_paths(places, tmp_path, monkeypatch):
    first, _, _ = places
    put(first, "ani1x")  # a name "ani1x" would find this; paths must not
    local = tmp_path / "work"
    local.mkdir()
    openmmnnp.NNPForce.convertModel("ani1ccx", str(local / "ani1x.nnpm"))
    monkeypatch.chdir(local)
    for path in ("ani1x.nnpm", "./ani1x.nnpm", str(local / "ani1x.nnpm")):
        assert openmmnnp.NNPForce.findModel(path) == path
        assert openmmnnp.NNPForce(path).getModelName() == "ani-1ccx_8x"
    assert openmmnnp.NNPForce(ANI1X).getModelPath() == ANI1X
    with pytest.raises(openmm.OpenMMException, match="cannot open model file './ani9z'"):
        openmmnnp.NNPForce("./ani9z")


def test_name_in_xml(places):
    force = openmmnnp.NNPForce("ani1x")
    force.setEmbedModelInXml(False)
    force.addAtom(0, 6, 0)
    copy = openmm.XmlSerializer.deserialize(openmm.XmlSerializer.serialize(force))
    assert openmmnnp.NNPForce.cast(copy).getModelPath() == "ani1x"


def test_install_command(tmp_path):
    zoo = os.path.dirname(ANI1X)
    dest = tmp_path / "dest"
    result = subprocess.run([sys.executable, "-m", "openmmnnp.models", "install", zoo, "--dest", str(dest),
                             "--models", "ani1x"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert sorted(os.listdir(dest)) == ["ani1x.nnpm"]
    assert (dest / "ani1x.nnpm").read_bytes() == converted(ANI1X, tmp_path)
    bad = subprocess.run([sys.executable, "-m", "openmmnnp.models", "install", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "not in the model zoo folder" in bad.stderr and "Traceback" not in bad.stderr
    listing = subprocess.run([sys.executable, "-m", "openmmnnp.models"], capture_output=True, text=True,
                             env=dict(os.environ, NNP_MODEL_PATH=str(dest)), timeout=60)
    assert listing.returncode == 0 and f"ani1x    {dest / 'ani1x.nnpm'}" in listing.stdout
