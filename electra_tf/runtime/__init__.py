"""What every command stands on: files written atomically (`atomic_io`), one writer per output
folder and the stop signals (`run_lock`), TensorFlow's start-up without its CPU-only noise
(`tf_startup`), and the machine's answers that configs' "auto" values resolve to
(`device_defaults`). No module here imports TensorFlow at import time: configs use them."""
