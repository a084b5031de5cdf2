"""Toolgate policy.

Before regorus is first imported (every module of this package imports it through here): a Rust
panic in the engine (a compiler limit, a fault) becomes a Python exception that the policy code
turns into a clear message, but Rust's panic hook also prints it to stderr, with a backtrace
when RUST_BACKTRACE is set. The backtrace is never wanted: both variables are forced off for
this process (``loader.quiet_panics`` also keeps the hook's two lines off the terminal at load).
"""

import os

os.environ["RUST_BACKTRACE"] = "0"
os.environ["RUST_LIB_BACKTRACE"] = "0"
