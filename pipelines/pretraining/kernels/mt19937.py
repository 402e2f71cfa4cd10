"""CPython's ``random.Random(seed)`` as numba functions: the same numbers from the same integer seed.

Google's algorithm draws from ``random.Random``; the compiled instance kernel must draw exactly the same
numbers, so this transcribes CPython 3.11's ``Modules/_randommodule.c`` and ``Lib/random.py``:

- seeding from an int: ``init_by_array`` with the seed's absolute value as little-endian 32-bit words
  (one word for a seed below 2**32, else as many as its bits need), after ``init_genrand(19650218)``;
- ``genrand_uint32``: MT19937 with tempering, 624 words regenerated at once;
- ``random()``: 53 bits from two words, ``(a >> 5) * 2**26 + (b >> 6)``, over 2**53;
- ``getrandbits(k)``: the top ``k`` bits of one word for ``k <= 32``; for larger ``k`` whole words from
  the least significant end, the last one's top bits;
- ``randint(a, b)`` = ``a + _randbelow(b - a + 1)``, ``_randbelow(n)``: ``getrandbits(n.bit_length())``
  until below ``n`` (rejection, so ``randint(0, 0)`` still consumes draws).

A generator's state is one ``uint64[625]`` array: the 624 words (kept below 2**32; 64-bit arithmetic
avoids numba's mixed-width promotions) and the index of the next word. All constants are typed uint64:
numba types ``uint64 op int64`` as float64.
"""

from __future__ import annotations

import numpy as np
from numba import njit

N = 624
_M = 397
_U64 = np.uint64
_MASK32 = _U64(0xFFFFFFFF)
_MATRIX_A = _U64(0x9908B0DF)
_UPPER = _U64(0x80000000)
_LOWER = _U64(0x7FFFFFFF)


def new_state() -> np.ndarray:
    """An unseeded state array (seed it with :func:`seed`)."""
    return np.zeros(N + 1, dtype=np.uint64)


@njit(cache=True)
def _init_genrand(mt: np.ndarray, s: np.uint64) -> None:
    mt[0] = s & _MASK32
    for i in range(1, N):
        prev = mt[i - 1]
        mt[i] = (_U64(1812433253) * (prev ^ (prev >> _U64(30))) + _U64(i)) & _MASK32
    mt[N] = _U64(N)


@njit(cache=True)
def seed_from(mt: np.ndarray, base: np.ndarray, seed: np.uint64) -> None:
    """``random.Random(seed)`` for ``0 <= seed < 2**64``, given ``base = init_genrand(19650218)``.

    ``base`` (:func:`genrand_base`) is the same for every seed: copying it saves a third of seeding.
    """
    seed = _U64(seed)
    mt[:] = base
    lo = seed & _MASK32
    hi = seed >> _U64(32)
    key_length = 2 if hi != _U64(0) else 1
    i = 1
    j = 0
    for _ in range(N if N > key_length else key_length):
        prev = mt[i - 1]
        key = lo if j == 0 else hi
        mt[i] = ((mt[i] ^ ((prev ^ (prev >> _U64(30))) * _U64(1664525))) + key + _U64(j)) & _MASK32
        i += 1
        j += 1
        if i >= N:
            mt[0] = mt[N - 1]
            i = 1
        if j >= key_length:
            j = 0
    for _ in range(N - 1):
        prev = mt[i - 1]
        mt[i] = ((mt[i] ^ ((prev ^ (prev >> _U64(30))) * _U64(1566083941))) - _U64(i)) & _MASK32
        i += 1
        if i >= N:
            mt[0] = mt[N - 1]
            i = 1
    mt[0] = _UPPER  # MSB is 1, assuring a non-zero initial array
    mt[N] = _U64(N)


@njit(cache=True)
def genrand_base() -> np.ndarray:
    """The state after ``init_genrand(19650218)``: where every ``init_by_array`` starts."""
    mt = np.zeros(N + 1, dtype=np.uint64)
    _init_genrand(mt, _U64(19650218))
    return mt


@njit(cache=True)
def seed(mt: np.ndarray, s: np.uint64) -> None:
    """``random.Random(s)`` for ``0 <= s < 2**64`` (tests; kernels reuse one base via :func:`seed_from`)."""
    seed_from(mt, genrand_base(), s)


@njit(cache=True)
def _twist(mt: np.ndarray) -> None:
    for kk in range(N - _M):
        y = (mt[kk] & _UPPER) | (mt[kk + 1] & _LOWER)
        mt[kk] = mt[kk + _M] ^ (y >> _U64(1)) ^ (_MATRIX_A if y & _U64(1) else _U64(0))
    for kk in range(N - _M, N - 1):
        y = (mt[kk] & _UPPER) | (mt[kk + 1] & _LOWER)
        mt[kk] = mt[kk + _M - N] ^ (y >> _U64(1)) ^ (_MATRIX_A if y & _U64(1) else _U64(0))
    y = (mt[N - 1] & _UPPER) | (mt[0] & _LOWER)
    mt[N - 1] = mt[_M - 1] ^ (y >> _U64(1)) ^ (_MATRIX_A if y & _U64(1) else _U64(0))
    mt[N] = _U64(0)


@njit(cache=True)
def genrand_uint32(mt: np.ndarray) -> np.uint64:
    if mt[N] >= _U64(N):
        _twist(mt)
    index = mt[N]
    y = mt[index]
    mt[N] = index + _U64(1)
    y ^= y >> _U64(11)
    y ^= (y << _U64(7)) & _U64(0x9D2C5680)
    y ^= (y << _U64(15)) & _U64(0xEFC60000)
    y ^= y >> _U64(18)
    return y


@njit(cache=True)
def random(mt: np.ndarray) -> float:
    """``Random.random()``: a float in [0, 1) with 53 random bits."""
    a = genrand_uint32(mt) >> _U64(5)
    b = genrand_uint32(mt) >> _U64(6)
    return (float(a) * 67108864.0 + float(b)) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def getrandbits(mt: np.ndarray, k: int) -> np.uint64:
    """``Random.getrandbits(k)`` for ``0 <= k <= 64``."""
    if k < 0 or k > 64:
        raise ValueError("getrandbits: k must be in [0, 64] here")
    if k == 0:
        return _U64(0)
    if k <= 32:
        return genrand_uint32(mt) >> _U64(32 - k)
    lo = genrand_uint32(mt)
    hi = genrand_uint32(mt) >> _U64(64 - k)
    return (hi << _U64(32)) | lo


@njit(cache=True)
def randbelow(mt: np.ndarray, n: int) -> int:
    """``Random._randbelow(n)`` (``_randbelow_with_getrandbits``) for ``0 < n < 2**63``."""
    k = 0
    m = n
    while m:  # n.bit_length()
        k += 1
        m >>= 1
    r = getrandbits(mt, k)
    while r >= _U64(n):
        r = getrandbits(mt, k)
    return int(r)


@njit(cache=True)
def randint(mt: np.ndarray, a: int, b: int) -> int:
    """``Random.randint(a, b)``: ``randrange(a, b + 1)``; an empty range raises ValueError as there."""
    width = b + 1 - a
    if width <= 0:
        raise ValueError("empty range for randrange()")
    return a + randbelow(mt, width)
