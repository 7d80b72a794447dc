"""torchmd-net TensorNet checkpoints (``.ckpt``) → ``.nnpm`` model files, without PyTorch.

A checkpoint is a zip archive holding a pickle and the raw bytes of its tensors. It is read through a
restricted unpickler: torch tensors and storages become NumPy arrays, Lightning's ``AttributeDict`` and
``collections.OrderedDict`` become dicts, and every other global (``os.system``, any class) is refused
before anything runs. The state dict and ``hyper_parameters`` are then checked against what the
TensorNet family of libnnp implements: anything else is refused by name.

    python -m openmmnnp.models convert CKPT [CKPT ...] OUT.nnpm [--energy-unit eV] [--length-unit angstrom]
"""
import io
import os
import pickle
import re
import struct
import zipfile
import zlib

import numpy as np
import openmm

#: The model's energy unit in kJ/mol, by name (eV: CODATA 2018, exact e·N_A).
ENERGY_UNITS = {"eV": 96.48533212331002, "kcal/mol": 4.184, "kJ/mol": 1.0, "hartree": 2625.4996387552483}
#: The model's length unit in Å, by name.
LENGTH_UNITS = {"angstrom": 1.0, "nm": 10.0}
#: torchmd-net's activations (its act_class_mapping) and their ids in the model file (libnnp's TN_ACT_*).
ACTIVATIONS = {"silu": 1, "ssp": 2, "tanh": 3, "sigmoid": 4, "swish": 5, "mish": 6}

_FAMILY_TENSORNET = 2
_NNPM_VERSION = 2
_MAX_NAME = 63
_STORAGES = {"FloatStorage": "<f4", "DoubleStorage": "<f8", "HalfStorage": "<f2", "LongStorage": "<i8",
             "IntStorage": "<i4", "ShortStorage": "<i2", "CharStorage": "i1", "ByteStorage": "u1",
             "BoolStorage": "?", "BFloat16Storage": "bfloat16"}


def _fail(message):
    raise openmm.OpenMMException(message)


class _AttributeDict(dict):
    """Lightning's AttributeDict, as a plain dict."""


class _OrderedDict(dict):
    """collections.OrderedDict as a dict. A module's state_dict() carries its _metadata (each
    submodule's version) as an attribute, which pickle restores by BUILD after the items: kept as
    an attribute here, never used."""


class _Storage:
    def __init__(self, name):
        self.name = name


def _rebuild_tensor(storage, offset, size, stride, *unused):
    if not isinstance(storage, np.ndarray):
        _fail("checkpoint: a tensor without storage")
    size, stride = tuple(size), tuple(stride)
    if len(size) == 0:
        return storage[offset:offset + 1].reshape(()).copy()
    need = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1
    if any(n == 0 for n in size):
        return np.zeros(size, dtype=storage.dtype)
    if min(stride) < 0 or need > storage.size:
        _fail("checkpoint: a tensor reaches beyond its storage")
    item = storage.itemsize
    return np.lib.stride_tricks.as_strided(storage[offset:], size, tuple(s * item for s in stride)).copy()


def _rebuild_parameter(data, *unused):
    return data


_ALLOWED = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("collections", "OrderedDict"): _OrderedDict,
    ("lightning.fabric.utilities.data", "AttributeDict"): _AttributeDict,
    ("lightning_fabric.utilities.data", "AttributeDict"): _AttributeDict,
    ("pytorch_lightning.utilities.parsing", "AttributeDict"): _AttributeDict,
    ("lightning.pytorch.utilities.parsing", "AttributeDict"): _AttributeDict,
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, data, archive, prefix):
        super().__init__(io.BytesIO(data))
        self.archive, self.prefix = archive, prefix

    def find_class(self, module, name):
        if module == "torch" and name in _STORAGES:
            return _Storage(name)
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        _fail(f"checkpoint names {module}.{name}, which a torchmd-net checkpoint does not need: refused, "
              "nothing was executed")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage" and isinstance(pid[1], _Storage)):
            _fail(f"checkpoint: unknown persistent id {pid!r:.80}")
        kind, key = pid[1].name, str(pid[2])
        try:
            raw = self.archive.read(f"{self.prefix}data/{key}")
        except KeyError:
            _fail(f"checkpoint: tensor data {key} is missing from the archive")
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as e:
            _fail(f"checkpoint: tensor data {key} cannot be read ({e})")
        dtype = _STORAGES[kind]
        if dtype == "bfloat16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            return u.view(np.float32)
        return np.frombuffer(raw, dtype=dtype)


def _open_zip(path):
    try:
        archive = zipfile.ZipFile(path)
        return archive, archive.namelist()
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        _fail(f"{path}: not a readable PyTorch checkpoint (zip archive): {e}")


def _pickle_of(names):
    return [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]


def _read_archive(archive, names, path):
    pkl = _pickle_of(names)
    if len(pkl) != 1:
        _fail(f"{path}: not a PyTorch checkpoint (no single data.pkl in the archive)")
    prefix = pkl[0][:-len("data.pkl")]
    order = f"{prefix}byteorder"
    try:
        if order in names and archive.read(order).strip() not in (b"little",):
            _fail(f"{path}: big-endian checkpoints are not supported")
        data = archive.read(pkl[0])
        return _Unpickler(data, archive, prefix).load()
    except openmm.OpenMMException as e:
        message = str(e)
        raise openmm.OpenMMException(message if message.startswith(f"{path}:") else f"{path}: {message}") from None
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as e:
        _fail(f"{path}: the archive is damaged ({e})")
    except (pickle.UnpicklingError, ValueError, TypeError, AttributeError, IndexError, KeyError) as e:
        _fail(f"{path}: the checkpoint's pickle cannot be read ({type(e).__name__}: {e})")


def read_checkpoint(path):
    """The pickled object of a torch.save zip file (a Lightning checkpoint: a dict), tensors as arrays."""
    archive, names = _open_zip(path)
    return _read_archive(archive, names, path)


def read_checkpoints(path):
    """[(label, checkpoint)] of a file: one checkpoint, or the members of a torchmd-net ensemble archive
    (a zip of .ckpt files, as torchmd-net's load_model takes it: those at its top level, by name)."""
    archive, names = _open_zip(path)
    if _pickle_of(names):
        return [(path, _read_archive(archive, names, path))]
    members = sorted(n for n in names if n.endswith(".ckpt") and "/" not in n)
    if not members:
        _fail(f"{path}: neither a PyTorch checkpoint (no single data.pkl in the archive) nor a torchmd-net "
              "ensemble (no .ckpt files at its top level)")
    out = []
    for n in members:
        label = f"{path}:{n}"
        try:
            inner = zipfile.ZipFile(io.BytesIO(archive.read(n)))
            inner_names = inner.namelist()
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as e:
            _fail(f"{label}: not a readable PyTorch checkpoint (zip archive): {e}")
        out.append((label, _read_archive(inner, inner_names, label)))
    return out


# --------------------------------------------------------------------------- the model

def _priors(hp):
    """(has Atomref, enabled) from hyper_parameters; other priors are refused."""
    prior = hp.get("prior_model")
    if not prior:
        return False, False
    items = prior if isinstance(prior, list) else [prior]
    names = []
    for p in items:
        if isinstance(p, dict):
            names += list(p.keys())
        else:
            names.append(p)
    other = [n for n in names if n != "Atomref"]
    if other or len(names) != 1:
        _fail(f"prior model(s) {', '.join(map(str, names))}: only a single Atomref prior is supported")
    args = hp.get("prior_args")
    if isinstance(args, list):
        args = args[0] if args else {}
    if args is None and isinstance(items[0], dict):
        args = items[0].get("Atomref") or {}
    enable = bool((args or {}).get("enable", True))
    return True, enable


def _layout(hp, layout):
    """(layout, why): the torchmd-net major version whose linears_scalar layout the checkpoint has."""
    if layout in ("2", "3"):
        return int(layout), "as asked"
    if layout != "auto":
        _fail(f"layout {layout!r}: use auto, 2 or 3")
    # torchmd-net 3.x stores the last radial linears in blocks [3][F], earlier versions interleaved
    # [F][3]. 'check_errors' in the hyper_parameters marks a checkpoint of torchmd-net <= 2.6.1 (3.x
    # itself detects old checkpoints so); without it, 2.6.2 and 3.x write the same keys: auto means
    # the 2.x layout, --layout 3 for 3.x checkpoints.
    if "check_errors" in hp:
        return 2, "check_errors marks torchmd-net <= 2.6.1"
    return 2, "assumed: give --layout 3 for a checkpoint written by torchmd-net 3.x"


def _member(ckpt, path, layout, atomref_mode="auto"):
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "hyper_parameters" not in ckpt:
        _fail(f"{path}: not a torchmd-net checkpoint (no state_dict and hyper_parameters)")
    hp, sd = ckpt["hyper_parameters"], ckpt["state_dict"]
    if not isinstance(hp, dict) or not isinstance(sd, dict):
        _fail(f"{path}: not a torchmd-net checkpoint (hyper_parameters or state_dict is not a dict)")
    sd = {re.sub(r"^model\.", "", k): v for k, v in sd.items()}
    sd = {re.sub(r"output_model\.output_network\.(\d+)\.(weight|bias)$", r"output_model.output_network.layers.\1.\2",
                 k): v for k, v in sd.items()}

    def need(key, ok):
        if key not in hp:
            _fail(f"{path}: hyper_parameters lack {key!r}")
        v = hp[key]
        if not ok(v):
            _fail(f"{path}: {key} = {v!r} is not supported by the TensorNet family (see docs/models.md)")
        return v
    need("model", lambda v: v == "tensornet")
    rbf_type = need("rbf_type", lambda v: v in ("expnorm", "gauss"))
    activation = ACTIVATIONS[need("activation", lambda v: v in ACTIVATIONS)]
    need("output_model", lambda v: v == "Scalar")
    reduce_op = need("reduce_op", lambda v: True)
    if reduce_op not in ("add", "sum"):  # torchmd-net's scatter: add and sum are one reduction
        _fail(f"{path}: reduce_op = {reduce_op!r} is not supported: the TensorNet family sums the atoms' energies "
              "(reduce_op add, torchmd-net's default, or sum)")
    group = need("equivariance_invariance_group", lambda v: v in ("O(3)", "SO(3)"))
    if hp.get("atom_filter", -1) not in (-1, None):
        _fail(f"{path}: atom_filter = {hp['atom_filter']!r} is not supported")
    if hp.get("box_vecs") is not None:
        _fail(f"{path}: the model has a built-in periodic box (box_vecs); use OpenMM's periodic box instead")
    F = int(need("embedding_dimension", lambda v: isinstance(v, int) and 0 < v <= 1024))
    L = int(need("num_layers", lambda v: isinstance(v, int) and 0 <= v <= 16))
    R = int(need("num_rbf", lambda v: isinstance(v, int) and 0 < v <= 1024))
    cl = float(need("cutoff_lower", lambda v: isinstance(v, (int, float)) and v >= 0))
    cu = float(need("cutoff_upper", lambda v: isinstance(v, (int, float)) and v > cl))
    has_ref, ref_on = _priors(hp)
    if atomref_mode not in ("auto", "on", "off"):
        _fail(f"atomref {atomref_mode!r}: use auto, on or off")
    if atomref_mode == "on" and not has_ref:
        _fail(f"{path}: atomref on: the checkpoint has no Atomref prior (torchmd-net adds one during training, "
              "enabled or not, for its reference energies)")
    if atomref_mode != "auto":  # as torchmd-net's load_model(..., remove_ref_energy=False) turns it on
        ref_on = atomref_mode == "on"
    layout, layout_why = _layout(hp, layout)

    used = set()

    def get(key, shape):
        if key not in sd:
            _fail(f"{path}: the state dict lacks {key}")
        a = sd[key]
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f":
            _fail(f"{path}: {key} is not a floating-point tensor")
        if tuple(a.shape) != tuple(shape):
            _fail(f"{path}: {key} has shape {tuple(a.shape)}, expected {tuple(shape)} (from the hyper_parameters)")
        a = a.astype(np.float64)
        if not np.all(np.isfinite(a)):
            _fail(f"{path}: {key} has non-finite values")
        used.add(key)
        return a

    def rows(key, ndim):  # the first size of an entry whose other sizes are checked by get()
        if key not in sd:
            _fail(f"{path}: the state dict lacks {key}")
        a = sd[key]
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f":
            _fail(f"{path}: {key} is not a floating-point tensor")
        if a.ndim != ndim:
            _fail(f"{path}: {key} has {a.ndim} dimension(s), expected {ndim}")
        return a.shape[0]

    def blocks(w):  # rows f·3 + k (torchmd-net 2.x) → k·F + f
        if layout == 3:
            return w
        return w.reshape((F, 3) + w.shape[1:]).swapaxes(0, 1).reshape(w.shape)

    rm, te = "representation_model.", "representation_model.tensor_embedding."
    emb = get(te + "emb.weight", (rows(te + "emb.weight", 2), F))
    max_z = emb.shape[0]
    if rbf_type == "gauss":  # exp(coeff (d - offset)^2): the offsets as means, -coeff as betas (R times)
        coeff = get(rm + "distance_expansion.coeff", ())
        arrays = [get(rm + "distance_expansion.offset", (R,)), np.full(R, -float(coeff))]
    else:
        arrays = [get(rm + "distance_expansion.means", (R,)), get(rm + "distance_expansion.betas", (R,))]
    lin = lambda key, o, i: [get(key + ".weight", (o, i)), get(key + ".bias", (o,))]
    emb2 = lin(te + "emb2", F, 2 * F)
    dp = sum((lin(te + f"distance_proj{k}", F, R) for k in (1, 2, 3)), [])
    elt = [get(te + f"linears_tensor.{k}.weight", (F, F)) for k in range(3)]
    els = lin(te + "linears_scalar.0", 2 * F, F) + [blocks(a) for a in lin(te + "linears_scalar.1", 3 * F, 2 * F)]
    init = [get(te + "init_norm.weight", (F,)), get(te + "init_norm.bias", (F,))]
    layers = []
    for l in range(L):
        p = f"{rm}layers.{l}."
        layers += lin(p + "linears_scalar.0", F, R) + lin(p + "linears_scalar.1", 2 * F, F)
        layers += [blocks(a) for a in lin(p + "linears_scalar.2", 3 * F, 2 * F)]
        layers += [get(p + f"linears_tensor.{k}.weight", (F, F)) for k in range(6)]
    out = [get(rm + "out_norm.weight", (3 * F,)), get(rm + "out_norm.bias", (3 * F,))] + lin(rm + "linear", F, 3 * F)
    head, n_in, k = [], F, 0
    keys = sorted(int(m.group(1)) for key in sd
                  for m in [re.match(r"output_model\.output_network\.layers\.(\d+)\.weight$", key)] if m)
    if not keys:
        _fail(f"{path}: the state dict has no output_model.output_network layers")
    for k in keys:
        key = f"output_model.output_network.layers.{k}"
        head.append(lin(key, rows(key + ".weight", 2), n_in))
        n_in = head[-1][0].shape[0]
    if n_in != 1:
        _fail(f"{path}: the output network gives {n_in} values per atom, expected 1")
    std = float(get("std", ()) if "std" in sd else 1.0)
    mean = float(get("mean", ()) if "mean" in sd else 0.0)
    atomref = None
    if has_ref and ref_on:
        if "prior_model.0.atomref.weight" not in sd:
            _fail(f"{path}: the Atomref prior has no prior_model.0.atomref.weight")
        atomref = get("prior_model.0.atomref.weight", (rows("prior_model.0.atomref.weight", 2), 1))[:, 0]
        max_z = min(max_z, atomref.shape[0])
        atomref = atomref[:max_z]
    for key in list(sd):
        if key.startswith("prior_model.0.") and has_ref:
            used.add(key)
    box = sd.get(rm + "distance.box")
    if box is not None:
        used.add(rm + "distance.box")
        if np.any(np.asarray(box) != 0):
            _fail(f"{path}: the model has a built-in periodic box (representation_model.distance.box); use "
                  "OpenMM's periodic box instead")
    used.update(k for k in sd if k.endswith("Zij_map") or k.endswith("initial_atomref"))
    unknown = sorted(set(sd) - used)
    if unknown:
        _fail(f"{path}: the state dict has entries a torchmd-net TensorNet does not: {', '.join(unknown[:5])}"
              + (" ..." if len(unknown) > 5 else ""))
    if max_z < 2:
        _fail(f"{path}: the embedding has {max_z} rows")
    arrays += [emb[:max_z]] + emb2 + dp + elt + els + init + layers + out + sum(head, [])
    if atomref is not None:
        arrays.append(atomref.reshape(max_z, 1))
    basis = 1 if rbf_type == "gauss" else 0  # the model file's activation field: basis << 8 | activation
    header = struct.pack("<8I4d", F, L, R, max_z, 1 if group == "O(3)" else 2, basis << 8 | activation, len(head),
                         atomref is not None, cl, cu, std, mean)
    body = [header]
    for a in arrays:
        a2 = a.reshape(1, -1) if a.ndim == 1 else a
        body.append(struct.pack("<2I", *a2.shape) + np.ascontiguousarray(a2, dtype="<f8").tobytes())
    info = dict(F=F, layers=L, rbf=R, cutoff=(cl, cu), group=group, max_z=max_z, head=len(head),
                atomref=atomref is not None, layout=layout, layout_why=layout_why, std=std, mean=mean,
                activation=hp["activation"], basis=rbf_type)
    return b"".join(body), info


def convert(checkpoints, output, energy_unit="eV", length_unit="angstrom", name=None, layout="auto", out=None,
            atomref="auto"):
    """Converts torchmd-net TensorNet checkpoints (paths, or dicts as read_checkpoint returns them; one,
    or several as ensemble members; a path may be a torchmd-net ensemble archive, a zip of .ckpt files,
    whose members come in name order) into a .nnpm file. atomref: "auto" adds an Atomref prior's
    reference energies when the checkpoint enables it, "on" whenever it has one (a model trained on
    energies less them: torchmd-net's load_model(..., remove_ref_energy=False)), "off" never. Returns a
    dict per member (sizes, cutoffs, layout)."""
    if isinstance(checkpoints, (str, os.PathLike)):
        checkpoints = [checkpoints]
    if not checkpoints:
        _fail("convert: no checkpoint given")
    if energy_unit not in ENERGY_UNITS:
        _fail(f"energy unit {energy_unit!r}: use one of {', '.join(ENERGY_UNITS)}")
    if length_unit not in LENGTH_UNITS:
        _fail(f"length unit {length_unit!r}: use one of {', '.join(LENGTH_UNITS)}")
    if name is None:
        name = "tensornet" if isinstance(checkpoints[0], dict) else os.path.splitext(os.path.basename(str(checkpoints[0])))[0]
    encoded = name.encode()
    if len(encoded) > _MAX_NAME or "\0" in name:
        _fail(f"model name {name!r} is longer than {_MAX_NAME} bytes")
    sources = []
    for k, source in enumerate(checkpoints):
        if isinstance(source, dict):
            sources.append((f"checkpoint {k}", source))
        else:
            path = os.fspath(source)
            if not os.path.isfile(path):
                _fail(f"{path}: no such checkpoint file")
            sources += read_checkpoints(path)
    members, infos = [], []
    for path, ckpt in sources:
        payload, info = _member(ckpt, path, layout, atomref)
        members.append(payload)
        infos.append(info)
        if out is not None:
            print(f"{path}: TensorNet F={info['F']}, {info['layers']} layers, {info['rbf']} radial functions, "
                  f"cutoff {info['cutoff'][0]}–{info['cutoff'][1]}, {info['group']}, {info['activation']}, "
                  f"{info['basis']} basis, elements 1–{info['max_z'] - 1}, "
                  f"Atomref {'on' if info['atomref'] else 'off'}, torchmd-net {info['layout']}.x layout of "
                  f"linears_scalar ({info['layout_why']})", file=out)
    payload = (struct.pack("<2I", _FAMILY_TENSORNET, len(encoded)) + encoded
               + struct.pack("<2d", ENERGY_UNITS[energy_unit], LENGTH_UNITS[length_unit])
               + struct.pack("<I", len(members)) + b"".join(members))
    head = b"NNPMODEL" + struct.pack("<IQ", _NNPM_VERSION, len(payload)) + payload
    data = head + struct.pack("<I", zlib.crc32(head) & 0xFFFFFFFF)
    output = os.fspath(output)
    partial = output + ".partial"
    with open(partial, "wb") as f:
        f.write(data)
    os.replace(partial, output)
    return infos
