#!/usr/bin/env python3
"""What can be checked of examples/image/rockcraft.yaml without rockcraft, LXD or snaps.

    tests/image/rock.py check         the recipe against rockcraft's and craft-parts'
                                      documented keys (and craft-parts' own part models
                                      when the craft-parts package is importable), and its
                                      pinned Rust against what the workspace needs
    tests/image/rock.py prime DIR     runs the cobble part's own commands (override-build,
                                      then override-prime) as rockcraft would, with the
                                      machine's Rust instead of the pinned one and Pebble's
                                      binary (when given as PEBBLE_BIN) as the pebble part;
                                      prints the primed usr/bin/pebble, the binary the rock's
                                      entrypoint runs, for tests/image/run.sh and runc.sh

Exits non-zero, naming what is wrong, on the first failure.
"""

import json
import os
import shutil
import subprocess
import sys

try:
    import yaml
except ImportError:
    # As runc.sh installs runc: Debian's package, when apt-get is there to install it.
    def apt_get(*args):
        command = ["apt-get", "-o", "DPkg::Lock::Timeout=600", *args]
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        return subprocess.run(command, **quiet).returncode == 0

    if shutil.which("apt-get") and not apt_get("install", "-y", "python3-yaml"):
        apt_get("update")
        apt_get("install", "-y", "python3-yaml")
    try:
        import yaml
    except ImportError:
        sys.exit("rock.py: needs PyYAML (Debian's python3-yaml), which could not be installed")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
RECIPE = os.environ.get("ROCKCRAFT_YAML") or os.path.join(REPO, "examples", "image", "rockcraft.yaml")

# rockcraft.yaml's top-level keys, as rockcraft's reference documents them.
ROCKCRAFT_KEYS = {
    "name", "title", "summary", "description", "version", "license", "base",
    "build-base", "platforms", "run-user", "environment", "services", "checks",
    "entrypoint-service", "entrypoint-command", "package-repositories", "parts",
    "extensions", "adopt-info", "contact", "issues", "source-code",
}
ROCKCRAFT_REQUIRED = {"name", "summary", "description", "version", "base", "platforms", "parts"}
ROCKCRAFT_BASES = {"bare", "ubuntu@20.04", "ubuntu@22.04", "ubuntu@24.04", "ubuntu@25.10"}
# The part keys every plugin takes, as craft-parts documents them.
PART_KEYS = {
    "plugin", "source", "source-checksum", "source-channel", "source-branch",
    "source-commit", "source-depth", "source-subdir", "source-submodules", "source-tag",
    "source-type", "disable-parallel", "after", "overlay-packages", "stage-snaps",
    "stage-packages", "stage-slices", "build-snaps", "build-packages", "build-environment",
    "build-attributes", "organize", "overlay", "stage", "prime", "override-pull",
    "overlay-script", "override-build", "override-stage", "override-prime", "permissions",
}
# The keys of the plugins the recipe uses, as craft-parts documents them.
PLUGIN_KEYS = {
    "nil": set(),
    "rust": {
        "rust-channel", "rust-features", "rust-path", "rust-no-default-features",
        "rust-use-global-lto", "rust-ignore-toolchain-file", "rust-cargo-parameters",
        "rust-inherit-ldflags",
    },
}
# The part rockcraft adds to every rock, which installs Pebble as usr/bin/pebble.
ROCKCRAFT_PARTS = {"pebble"}


def fail(message):
    sys.exit(f"rock.py: {examples_path()}: {message}")


def examples_path():
    return os.path.relpath(RECIPE, REPO)


def load():
    with open(RECIPE) as f:
        return yaml.safe_load(f)


def version(text):
    return tuple(int(p) for p in str(text).split("."))


def needed_rust():
    """The newest rust-version of the workspace and of the packages in its lock file."""
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked"],
        cwd=REPO, check=True, capture_output=True, text=True,
    ).stdout
    packages = json.loads(out)["packages"]
    needs = [(version(p["rust_version"]), p["name"]) for p in packages if p.get("rust_version")]
    return max(needs)


def check():
    recipe = load()
    keys = set(recipe)
    if keys - ROCKCRAFT_KEYS:
        fail(f"keys rockcraft does not know: {sorted(keys - ROCKCRAFT_KEYS)}")
    if ROCKCRAFT_REQUIRED - keys:
        fail(f"keys rockcraft requires are missing: {sorted(ROCKCRAFT_REQUIRED - keys)}")
    if recipe["base"] not in ROCKCRAFT_BASES:
        fail(f"base {recipe['base']!r} is not one of {sorted(ROCKCRAFT_BASES)}")
    if recipe["base"] == "bare" and recipe.get("build-base") not in ROCKCRAFT_BASES - {"bare"}:
        fail("a bare rock needs an Ubuntu build-base")
    try:
        import craft_parts
    except ImportError:
        craft_parts = None
    parts = recipe["parts"]
    for name, part in parts.items():
        plugin = part.get("plugin")
        if plugin not in PLUGIN_KEYS:
            fail(f"part {name}: plugin {plugin!r} is not one this check knows")
        unknown = set(part) - PART_KEYS - PLUGIN_KEYS[plugin]
        if unknown:
            fail(f"part {name}: keys the {plugin} plugin does not take: {sorted(unknown)}")
        for after in part.get("after", []):
            if after not in parts and after not in ROCKCRAFT_PARTS:
                fail(f"part {name}: after {after!r}, which is no part")
        if craft_parts is not None:
            try:
                craft_parts.validate_part(dict(part))
            except Exception as e:  # craft-parts' own model says why
                fail(f"part {name}: craft-parts refuses it: {e}")
        if plugin == "rust":
            channel = part.get("rust-channel")
            if channel is None:
                fail(f"part {name}: no rust-channel: the build base's rustc would be used")
            needs, package = needed_rust()
            if version(channel) < needs:
                fail(
                    f"part {name}: rust-channel {channel} is older than the "
                    f"{'.'.join(map(str, needs))} {package} needs"
                )
    how = f"craft-parts {craft_parts.__version__}'s models" if craft_parts else "the documented keys"
    print(f"{examples_path()}: {len(parts)} part(s) valid by {how}")


def run_script(script, cwd, env):
    subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, check=True)


def prime(root):
    """Lays the rock's file system out under ROOT/prime as rockcraft's steps would."""
    recipe = load()
    part = recipe["parts"]["cobble"]
    if part.get("source") != "cobble":
        fail("the cobble part's source is not ./cobble")
    install = os.path.join(root, "install")
    primed = os.path.join(root, "prime")
    bin_dir = os.path.join(root, "bin")
    for d in (install, primed):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    os.makedirs(bin_dir, exist_ok=True)
    # The pebble part, primed first (the cobble part comes after it).
    pebble = os.environ.get("PEBBLE_BIN")
    if pebble:
        os.makedirs(os.path.join(primed, "usr", "bin"), exist_ok=True)
        shutil.copy2(pebble, os.path.join(primed, "usr", "bin", "pebble"))
    # `craftctl default` in override-prime: the part's installed files into the prime dir.
    craftctl = os.path.join(bin_dir, "craftctl")
    with open(craftctl, "w") as f:
        f.write(
            "#!/bin/sh\n"
            '[ "$1" = default ] || { echo "craftctl $1: not simulated" >&2; exit 1; }\n'
            'cp -a "$CRAFT_PART_INSTALL/." "$CRAFT_PRIME/"\n'
        )
    os.chmod(craftctl, 0o755)
    env = dict(os.environ, CRAFT_PART_INSTALL=install, CRAFT_PRIME=primed)
    env["PATH"] = bin_dir + os.pathsep + env["PATH"]
    # The build runs in the part's source, a cobble checkout: this one.
    run_script(part["override-build"], REPO, env)
    run_script(part["override-prime"], primed, env)
    cobble = os.path.join(primed, "usr", "bin", "cobble")
    entry = os.path.join(primed, "usr", "bin", "pebble")
    with open(cobble, "rb") as a, open(entry, "rb") as b:
        if a.read() != b.read():
            fail("the primed usr/bin/pebble is not cobble")
    print(entry)


def main():
    if sys.argv[1:] == ["check"]:
        check()
    elif len(sys.argv) == 3 and sys.argv[1] == "prime":
        prime(os.path.abspath(sys.argv[2]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
