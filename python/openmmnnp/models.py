"""Models by name: where NNPForce("ani2x") looks, and how to put models there.

    python -m openmmnnp.models                      where each name resolves, and the search path
    python -m openmmnnp.models install ZOO_FOLDER   convert the ANI model zoo into the per-user cache
    python -m openmmnnp.models convert CKPT [CKPT ...] OUT.nnpm [--energy-unit eV] [--length-unit angstrom]
                                                  a torchmd-net TensorNet checkpoint (several: an ensemble)
    python -m openmmnnp.models convert CKPT --name NAME   the same, into the per-user cache as NAME.nnpm

A name resolves to ``<name>.nnpm`` in the first folder of :func:`searchPath` that holds one: the
folders of ``NNP_MODEL_PATH``, the per-user cache, then the models of the ``openmm-nnp-models`` wheel.
"""
import argparse
import os
import sys

import openmm

#: Model names and the NeuroChem ``.info`` file of each in the ANI model zoo.
ZOO = {"ani1x": "ani-1x_8x.info", "ani1ccx": "ani-1ccx_8x.info", "ani2x": "ani-2x_8x.info"}


def searchPath():
    """The folders searched for model names, in order."""
    from . import NNPForce
    return list(NNPForce.getModelSearchPath())


def modelNames(folders=None):
    """The model names: the ANI zoo's, then every other NAME.nnpm in the search path's folders (a
    converted TensorNet, say), in search order."""
    names = dict.fromkeys(ZOO)
    for folder in searchPath() if folders is None else folders:
        try:
            files = sorted(os.listdir(folder))
        except OSError:
            continue
        for f in files:
            if f.endswith(".nnpm") and len(f) > 5 and os.path.isfile(os.path.join(folder, f)):
                names.setdefault(f[:-5])
    return list(names)


def findModel(name):
    """The file a model name resolves to (a path is returned unchanged); raises OpenMMException if none."""
    from . import NNPForce
    return NNPForce.findModel(name)


def cacheFolder():
    """The per-user cache folder, as libnnp searches it: $XDG_CACHE_HOME/openmm-nnp/models (an absolute
    XDG_CACHE_HOME), else $HOME/.cache/openmm-nnp/models; None when neither is set."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return os.path.join(xdg, "openmm-nnp", "models")
    home = os.environ.get("HOME")
    return os.path.join(home, ".cache", "openmm-nnp", "models") if home else None


def _cacheOrFail():
    folder = cacheFolder()
    if folder is None:
        raise openmm.OpenMMException("no per-user model cache: HOME is not set (nor an absolute XDG_CACHE_HOME), so "
                                     "names would not find the models; give a destination folder (--dest FOLDER, "
                                     "or OUT.nnpm) and put it on NNP_MODEL_PATH")
    return folder


def _makeFolder(folder):
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise openmm.OpenMMException(f"the destination {folder} exists and is not a folder")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise openmm.OpenMMException(f"cannot create the destination folder {folder}: {e.strerror}") from None


def install(zoo, destination=None, names=None, out=sys.stdout):
    """Converts the models of an ANI model zoo folder (``ani-2x_8x.info`` …) into ``<name>.nnpm`` files
    in ``destination`` (default: the per-user cache). Returns the files written."""
    from . import NNPForce
    destination = destination or _cacheOrFail()
    names = names or list(ZOO)
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        raise openmm.OpenMMException(f"unknown model name(s) {', '.join(unknown)}; known: {', '.join(ZOO)}")
    sources = {n: os.path.join(zoo, ZOO[n]) for n in names}
    missing = [p for p in sources.values() if not os.path.isfile(p)]
    if missing:
        raise openmm.OpenMMException(f"not in the model zoo folder {zoo}: {', '.join(missing)}")
    _makeFolder(destination)
    targets = {n: os.path.join(destination, n + ".nnpm") for n in names}
    for target in targets.values():
        if os.path.exists(target) and not os.path.isfile(target):
            raise openmm.OpenMMException(f"{target} exists and is not a regular file: not replaced")
    written = []
    for name, source in sources.items():
        target = targets[name]
        partial = target + ".partial"
        print(f"converting {source} -> {target}", file=out, flush=True)
        try:
            NNPForce.convertModel(source, partial)
            os.replace(partial, target)  # never leaves a half-written model under the name
        except (OSError, openmm.OpenMMException) as e:
            if os.path.isfile(partial):
                os.remove(partial)
            if isinstance(e, OSError):
                raise openmm.OpenMMException(f"cannot write {target}: {e.strerror}") from None
            raise
        written.append(target)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m openmmnnp.models", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("list", help="where each model name resolves: the ANI zoo's and every NAME.nnpm in the search "
                   "path (the default)")
    inst = sub.add_parser("install", help="convert an ANI model zoo folder into .nnpm files found by name")
    inst.add_argument("zoo", help="folder holding ani-1x_8x.info, ani-1ccx_8x.info, ani-2x_8x.info")
    inst.add_argument("--dest", help=f"destination folder (default: the per-user cache, {cacheFolder() or 'none: HOME is not set'})")
    inst.add_argument("--models", nargs="+", choices=list(ZOO), help="models to convert (default: all)")
    conv = sub.add_parser("convert", help="convert torchmd-net TensorNet checkpoints (.ckpt, or an ensemble .zip) into a .nnpm file",
                          description="Reads torchmd-net / Lightning checkpoints without PyTorch (a restricted "
                          "unpickler: nothing in the file is executed). Several checkpoints, or the .ckpt files of a "
                          "torchmd-net ensemble .zip, become the members of one ensemble.")
    conv.add_argument("paths", nargs="+", metavar="PATH", help="checkpoints, then OUT.nnpm (unless --name)")
    conv.add_argument("--energy-unit", default="eV", choices=["eV", "kcal/mol", "kJ/mol", "hartree"],
                      help="the energy unit the model was trained in (default eV, as AceFF)")
    conv.add_argument("--length-unit", default="angstrom", choices=["angstrom", "nm"],
                      help="the length unit the model was trained in (default angstrom)")
    conv.add_argument("--name", help="the model's name; without OUT.nnpm, writes NAME.nnpm into the per-user cache")
    conv.add_argument("--layout", default="auto", choices=["auto", "2", "3"],
                      help="torchmd-net version that wrote the checkpoint: 2 (up to 2.6.x, the default for auto) "
                      "or 3 (3.x stores the last radial linears in another order)")
    conv.add_argument("--atomref", default="auto", choices=["auto", "on", "off"],
                      help="the Atomref prior's reference energies: as the checkpoint enables them (auto, the "
                      "default), on whenever it has the prior (a model trained without them: torchmd-net's "
                      "remove_ref_energy=False), or off")
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            install(args.zoo, args.dest, args.models)
            return 0
        if args.command == "convert":
            from . import torchmdnet
            paths = list(args.paths)
            if paths[-1].endswith(".nnpm"):
                output, checkpoints = paths[-1], paths[:-1]
            elif args.name:
                folder = _cacheOrFail()
                _makeFolder(folder)
                output, checkpoints = os.path.join(folder, args.name + ".nnpm"), paths
            else:
                parser.error("convert: give OUT.nnpm after the checkpoints, or --name NAME")
            torchmdnet.convert(checkpoints, output, args.energy_unit, args.length_unit, args.name, args.layout,
                               out=sys.stdout, atomref=args.atomref)
            print(f"wrote {output}")
            return 0
        print("search path (first match wins):")
        folders = searchPath()
        for folder in folders:
            print(f"  {folder}")
        for name in modelNames(folders):
            try:
                print(f"{name:8} {findModel(name)}")
            except openmm.OpenMMException:
                print(f"{name:8} not found")
        return 0
    except openmm.OpenMMException as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
