"""electra-tf: ELECTRA pre-training and fine-tuning in TensorFlow 2 / tf_keras, faithful to
google-research/electra."""

__version__ = "0.1.0"

import importlib
import importlib.util
import sys

# The public API (electra_tf/api.py), imported on first use: `import electra_tf` stays cheap.
from electra_tf.api import PUBLIC as _PUBLIC  # noqa: E402

__all__ = sorted(_PUBLIC)

# Modules that moved into a subpackage: old dotted name -> the module as it is named now.
# Users' code and older docs hold the old names; importing one gives the moved module itself
# (the same object in sys.modules, so a monkeypatch through either name patches both).
MOVED_MODULES: dict[str, str] = {
    "electra_tf.config_checks": "electra_tf.config.checks",
    "electra_tf.model_config": "electra_tf.config.model",
    "electra_tf.presets": "electra_tf.config.presets",
    "electra_tf.atomic_io": "electra_tf.runtime.atomic_io",
    "electra_tf.run_lock": "electra_tf.runtime.run_lock",
    "electra_tf.tf_startup": "electra_tf.runtime.tf_startup",
    "electra_tf.device_defaults": "electra_tf.runtime.device_defaults",
    "electra_tf.layerwise_lr": "electra_tf.optimization.layerwise_lr",
    "electra_tf.checkpoint_names": "electra_tf.checkpoints.names",
    "electra_tf.format_registry": "electra_tf.checkpoints.format_registry",
}


class _MovedModuleLoader:
    """Hands out the moved module under its old name: `create_module` imports it under its new
    one, `exec_module` runs nothing (the module ran already) and gives back the module's own
    spec, which the import system set to the old name's in between."""

    def __init__(self, new_name: str):
        self.new_name = new_name
        self.spec = None

    def create_module(self, spec):
        module = importlib.import_module(self.new_name)
        self.spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self.spec


class _MovedModuleFinder:
    """A `sys.meta_path` finder for the names in `MOVED_MODULES` only."""

    @staticmethod
    def find_spec(name: str, path=None, target=None):
        if name not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(name, _MovedModuleLoader(MOVED_MODULES[name]))


if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder())


def __getattr__(name: str):
    from electra_tf.api import public_object

    return public_object(name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
