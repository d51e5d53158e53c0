import os
import sys

import numpy as np
import pytest

# Make the helper module importable whatever pytest's import mode is.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

REPLAY_KEY = bytes(range(32))  # a fixed, public key: replay/audit tests only


@pytest.fixture
def rng():
    return np.random.default_rng(20240601)


@pytest.fixture
def replay_key_bytes():
    return REPLAY_KEY


@pytest.fixture
def replay_key():
    import dpattn

    return dpattn.NoiseKey.for_replay(REPLAY_KEY)
