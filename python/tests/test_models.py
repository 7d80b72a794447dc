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


def nnpm_bytes():
    with open(openmmnnp.NNPForce.findModel("ani1x"), "rb") as f:
        return f.read()


def test_model_file_checks(tmp_path):
    """Clear messages for empty, foreign and oversized files, decided from the header and the file's
    size before the file is read."""
    data = nnpm_bytes()
    empty = tmp_path / "empty.nnpm"
    empty.write_bytes(b"")
    with pytest.raises(openmm.OpenMMException, match="is empty"):
        openmmnnp.NNPForce(str(empty))
    flipped = tmp_path / "flipped.nnpm"
    flipped.write_bytes(b"X" + data[1:])
    with pytest.raises(openmm.OpenMMException, match="not a model: not an .nnpm file"):
        openmmnnp.NNPForce(str(flipped))
    archive = tmp_path / "model.pt"  # a zip (a PyTorch file) under a name NNPForce does not convert
    archive.write_bytes(open(os.path.join(os.path.dirname(__file__), "data", "tensornet", "so3-lower.ckpt"), "rb").read())
    with pytest.raises(openmm.OpenMMException, match="is not a model but a zip archive.*python -m openmmnnp.models convert"):
        openmmnnp.NNPForce(str(archive))
    binary = tmp_path / "binary.dat"
    binary.write_bytes(b"\x00\x01garbage" * 10)
    with pytest.raises(openmm.OpenMMException, match="not a model"):
        openmmnnp.NNPForce(str(binary))
    # a valid header in front of a 5 GB (sparse) file: refused from the sizes, nothing read
    huge = tmp_path / "huge.nnpm"
    with open(huge, "wb") as f:
        f.write(data[:20])
        f.truncate(5 * 2**30)
    with pytest.raises(openmm.OpenMMException, match="model file has 5368709120 bytes, its header says"):
        openmmnnp.NNPForce(str(huge))
    claims = tmp_path / "claims.nnpm"
    claims.write_bytes(data[:12] + (2**40).to_bytes(8, "little") + data[20:100])
    with pytest.raises(openmm.OpenMMException, match="more than a model may have"):
        openmmnnp.NNPForce(str(claims))
    truncated = tmp_path / "truncated.nnpm"
    truncated.write_bytes(data[:-10])
    with pytest.raises(openmm.OpenMMException, match="truncated"):
        openmmnnp.NNPForce(str(truncated))


def test_model_from_pipe_and_fifo(tmp_path):
    """The file is opened once: /dev/stdin and a FIFO work (a second open used to refuse or hang)."""
    code = "import openmmnnp, sys; print(openmmnnp.NNPForce(sys.argv[1]).getNumEnsembleMembers())"
    data = nnpm_bytes()
    piped = subprocess.run([sys.executable, "-c", code, "/dev/stdin"], input=data, capture_output=True, timeout=120)
    assert piped.returncode == 0 and piped.stdout.strip() == b"8", piped.stderr
    fifo = tmp_path / "model.fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen([sys.executable, "-c", code, str(fifo)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with open(fifo, "wb") as f:
        f.write(data)
    out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0 and out.strip() == b"8", err


def test_info_files_stay_in_their_folder(tmp_path):
    """A NeuroChem .info may only name files inside its own folder; the message does not quote the
    foreign file."""
    zoo = os.path.dirname(ANI1X)
    lines = open(ANI1X).read().split("\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT\n")
    model = tmp_path / "models"
    model.mkdir()
    import shutil
    for line in lines[:3]:
        name = line.strip().split("/")[0]
        if name and not os.path.exists(model / name):
            os.symlink(os.path.join(zoo, name), model / name)
    # a symbolic link out of the folder is refused like the paths below; a copy loads
    info = model / "linked.info"
    info.write_text("\n".join(lines))
    with pytest.raises(openmm.OpenMMException, match="outside the model's folder"):
        openmmnnp.NNPForce(str(info))
    for line in lines[:3]:
        name = line.strip().split("/")[0]
        if name and os.path.islink(model / name):
            os.unlink(model / name)
            shutil.copytree(os.path.join(zoo, name), model / name)
    for bad in ("../secret.txt", str(secret), "a/../../secret.txt"):
        info = model / "bad.info"
        info.write_text("\n".join([bad] + lines[1:]))
        with pytest.raises(openmm.OpenMMException, match="outside its folder") as e:
            openmmnnp.NNPForce(str(info))
        assert "TOP-SECRET" not in str(e.value)
    info = model / "good.info"
    info.write_text("\n".join(lines))
    assert openmmnnp.NNPForce(str(info)).getNumEnsembleMembers() == 8


def test_install_command_errors(tmp_path):
    """--dest a file or an uncreatable folder, a target that is a folder, no HOME: a message each, no
    traceback, nothing half-written left behind."""
    zoo = os.path.dirname(ANI1X)

    def install(*extra, env=None):
        return subprocess.run([sys.executable, "-m", "openmmnnp.models", "install", zoo, "--models", "ani1x", *extra],
                              capture_output=True, text=True, timeout=300, env=env)
    afile = tmp_path / "afile"
    afile.write_text("x")
    for dest, message in [(afile, "exists and is not a folder"), (afile / "sub", "cannot create the destination folder")]:
        result = install("--dest", str(dest))
        assert result.returncode == 1 and message in result.stderr and "Traceback" not in result.stderr, result.stderr
    dest = tmp_path / "dest"
    (dest / "ani1x.nnpm").mkdir(parents=True)
    result = install("--dest", str(dest))
    assert result.returncode == 1 and "exists and is not a regular file" in result.stderr, result.stderr
    assert sorted(os.listdir(dest)) == ["ani1x.nnpm"]  # no .partial left
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "XDG_CACHE_HOME")}
    result = install(env=env)
    assert result.returncode == 1 and "HOME is not set" in result.stderr and "Traceback" not in result.stderr, result.stderr
    result = install(env=dict(env, HOME=""))
    assert result.returncode == 1 and "HOME is not set" in result.stderr
