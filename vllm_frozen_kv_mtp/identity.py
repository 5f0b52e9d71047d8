"""What names this plugin everywhere: its method name and its version. A leaf (it imports
nothing), so that any module can read them without importing the package's root, whose
``register()`` reaches the patches."""

__version__ = "0.1.0"

#: the ``"method"`` of a speculative config this plugin serves
METHOD = "frozen_kv_mtp"
