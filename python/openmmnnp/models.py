"""Models by name: where NNPForce("ani2x") looks, and how to put models there.

    python -m openmmnnp.models                      where each name resolves, and the search path
    python -m openmmnnp.models install ZOO_FOLDER   convert the ANI model zoo into the per-user cache

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


def findModel(name):
    """The file a model name resolves to (a path is returned unchanged); raises OpenMMException if none."""
    from . import NNPForce
    return NNPForce.findModel(name)


def cacheFolder():
    """The per-user cache folder: $XDG_CACHE_HOME/openmm-nnp/models or ~/.cache/openmm-nnp/models."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return os.path.join(xdg, "openmm-nnp", "models")
    return os.path.join(os.path.expanduser("~"), ".cache", "openmm-nnp", "models")


def install(zoo, destination=None, names=None, out=sys.stdout):
    """Converts the models of an ANI model zoo folder (``ani-2x_8x.info`` …) into ``<name>.nnpm`` files
    in ``destination`` (default: the per-user cache). Returns the files written."""
    from . import NNPForce
    destination = destination or cacheFolder()
    names = names or list(ZOO)
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        raise openmm.OpenMMException(f"unknown model name(s) {', '.join(unknown)}; known: {', '.join(ZOO)}")
    sources = {n: os.path.join(zoo, ZOO[n]) for n in names}
    missing = [p for p in sources.values() if not os.path.isfile(p)]
    if missing:
        raise openmm.OpenMMException(f"not in the model zoo folder {zoo}: {', '.join(missing)}")
    os.makedirs(destination, exist_ok=True)
    written = []
    for name, source in sources.items():
        target = os.path.join(destination, name + ".nnpm")
        partial = target + ".partial"
        print(f"converting {source} -> {target}", file=out, flush=True)
        NNPForce.convertModel(source, partial)
        os.replace(partial, target)  # never leaves a half-written model under the name
        written.append(target)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m openmmnnp.models", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("list", help="where each model name resolves (the default)")
    inst = sub.add_parser("install", help="convert an ANI model zoo folder into .nnpm files found by name")
    inst.add_argument("zoo", help="folder holding ani-1x_8x.info, ani-1ccx_8x.info, ani-2x_8x.info")
    inst.add_argument("--dest", help=f"destination folder (default: the per-user cache, {cacheFolder()})")
    inst.add_argument("--models", nargs="+", choices=list(ZOO), help="models to convert (default: all)")
    args = parser.parse_args(argv)
    try:
        if args.command == "install":
            install(args.zoo, args.dest, args.models)
            return 0
        print("search path (first match wins):")
        for folder in searchPath():
            print(f"  {folder}")
        for name in ZOO:
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
