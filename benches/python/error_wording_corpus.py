#!/usr/bin/env python3
"""How many error messages Paddock words as CPython does (issue 28, item 3).

Runs each case below through `paddock run` (all in one engine, one file each) and through this
Python, and compares the `error` of the result object (`Type: message (line N)`, the line left
off) with `Type: message` of the uncaught exception. Prints each miss and `matched N/M`.

    python3 benches/python/error_wording_corpus.py [--paddock target/release/paddock] [-v]

The cases come from CPython's own Lib/test (the file and line of 3.11.7's copy are named for
each) and from the issue's list. The words compared are CPython 3.14's: where the Python that
runs this script words a case otherwise (3.11 says "unhashable type: 'list'" for a dict key,
"2 is not in list" for list.index, "math domain error" for every math function), the case
carries 3.14's text, from the C source named beside it, and that text is compared instead.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# (script, where it comes from, CPython 3.14's `Type: message` where 3.11's differs, else None)
CASES = [
    # Argument counts: Lib/test/test_call.py, class CFunctionCallsErrorMessages.
    ("{}.__contains__()", "test_call.py:53 test_varargs0", None),
    ("{}.__contains__(0, 1)", "test_call.py:57 test_varargs2", None),
    ("int.from_bytes(b'a', 'little', False)", "test_call.py:61 test_varargs3", None),
    ("{}.get()", "test_call.py:65 test_varargs1min", None),
    ("{}.keys(x=2)", "test_call.py:176 test_oldargs0_1_kw", None),
    ("[].count()", "test_call.py:184 test_oldargs1_0", None),
    ("[].count(1, 2)", "test_call.py:188 test_oldargs1_2", None),
    ("[].count(x=2)", "test_call.py:192 test_oldargs1_0_kw", None),
    # Lib/test/test_builtin.py
    ("abs()", "test_builtin.py:190 test_abs", None),
    ("all()", "test_builtin.py:203 test_all", None),
    ("any()", "test_builtin.py:218 test_any", None),
    ("chr()", "test_builtin.py:309 test_chr", None),
    # Lib/test/list_tests.py, seq_tests.py, test_dict.py
    ("[].append()", "list_tests.py:243 test_append", None),
    ("[].extend()", "list_tests.py:263 test_extend", None),
    ("[].remove()", "list_tests.py:317 test_remove", None),
    ("(1, 2).count()", "seq_tests.py:362 test_count", None),
    ("(1, 2).index()", "seq_tests.py:395 test_index", None),
    ("{}.keys(None)", "test_dict.py:89 test_keys", None),
    ("{}.values(None)", "test_dict.py:97 test_values", None),
    ("{}.items(None)", "test_dict.py:106 test_items", None),
    ("{}.clear(None)", "test_dict.py:190 test_clear", None),
    ("{}.copy(None)", "test_dict.py:337 test_copy", None),
    ("{}.get(None, None, None)", "test_dict.py:388 test_get", None),
    ("{}.setdefault()", "test_dict.py:400 test_setdefault", None),
    ("{}.pop()", "test_dict.py:501 test_pop", None),
    # The issue's own.
    ("len(1, 2)", "issue 28", None),
    ("{}.keys(1)", "issue 28", None),
    ("words = ['a']\nwords.append()", "issue 28", None),
    ("import math\nmath.sqrt()", "test_call.py:256 test_o_error_no_arg (a METH_O function)", None),

    # Unhashable dict keys and set elements. CPython 3.14: Objects/dictobject.c
    # dict_unhashable_type "cannot use '%T' as a dict key (%S)", Objects/setobject.c
    # set_unhashable_type "cannot use '%T' as a set element (%S)"; hash() is unchanged.
    ("{[]: 1}", "issue 28",
     "TypeError: cannot use 'list' as a dict key (unhashable type: 'list')"),
    ("d = {}\nd[[1, 2]] = 3", "issue 28",
     "TypeError: cannot use 'list' as a dict key (unhashable type: 'list')"),
    ("{'a': 1}.get({})", "test_dict.py:387 test_get (a dict key)",
     "TypeError: cannot use 'dict' as a dict key (unhashable type: 'dict')"),
    ("key = (1, [2])\ncounts = {key: 0}", "issue 28 (the key is the tuple)",
     "TypeError: cannot use 'tuple' as a dict key (unhashable type: 'list')"),
    ("{1}.add([])", "test_set.py:416 test_add",
     "TypeError: cannot use 'list' as a set element (unhashable type: 'list')"),
    ("{[1]}", "issue 28",
     "TypeError: cannot use 'list' as a set element (unhashable type: 'list')"),
    ("hash([])", "test_hash.py:137 test_error_hash", None),

    # list.index and list.remove. CPython 3.14: Objects/listobject.c list_index_impl
    # "list.index(x): x not in list" (3.11 printed "%R is not in list").
    ("[0, 1].remove(2)", "list_tests.py:315 test_remove", None),
    ("[1].remove(2)", "test_xml_etree.py:331", None),
    ("[0, 1, 2].index(2, 0, 2)", "list_tests.py:369 test_index",
     "ValueError: list.index(x): x not in list"),
    ("[1].index(None)", "list_tests.py:382 test_index",
     "ValueError: list.index(x): x not in list"),
    ("(0, 1).index(2)", "seq_tests.py:379 test_index", None),

    # A local read before assignment: Lib/test/test_scope.py, test_exceptions.py.
    ("def f():\n    print(y)\n    y = 1\nf()", "test_scope.py:319 testUnboundLocal", None),
    ("def f():\n    try:\n        raise Exception()\n    except Exception as e:\n        pass\n"
     "    e\nf()", "test_exceptions.py:711 test_exception_cleanup_names", None),
    ("def g():\n    x += 1\ng()", "issue 28", None),

    # Concatenation: Objects/listobject.c list_concat, Objects/tupleobject.c tupleconcat.
    ("[1] + 1", "issue 28", None),
    ("[] + ()", "issue 28", None),
    ("[] + None", "issue 28", None),
    ("() + []", "issue 28", None),
    ("'a' + 1", "issue 28 (str, worded alike already)", None),

    # Keyword arguments given twice: Lib/test/test_extcall.py doctests.
    ("f = lambda *a, **k: None\nf(1, 2, **{'a': -1, 'b': 5}, **{'a': 4, 'c': 6})",
     "test_extcall.py:55", None),
    ("f = lambda *a, **k: None\nf(1, 2, **{'a': -1, 'b': 5}, a=4, c=6)",
     "test_extcall.py:59", None),
    ("def g(x, *y, **z):\n    pass\ng(1, 2, 3, **{'x': 4, 'y': 5})", "test_extcall.py:250", None),
    ("dir(b=1, **{'b': 1})", "test_extcall.py:336", None),

    # Raising what is not an exception: Lib/test/test_raise.py.
    ("raise 'foo'", "test_raise.py:498", None),
    ("raise 1", "issue 28", None),
    ("raise IndexError from 5", "test_raise.py:174 test_invalid_cause", None),

    # Math domain errors. CPython 3.14: Modules/mathmodule.c, FUNC1D/FUNC1AD err_msg and
    # loghelper ("expected a positive input[, got %s]"); the argument printed as repr().
    ("import math\nmath.acos(float('inf'))", "test_math.py:267 testAcos",
     "ValueError: expected a number in range from -1 up to 1, got inf"),
    ("import math\nmath.acosh(0)", "test_math.py:277 testAcosh",
     "ValueError: expected argument value not less than 1, got 0.0"),
    ("import math\nmath.acosh(-1)", "test_math.py:278 testAcosh",
     "ValueError: expected argument value not less than 1, got -1.0"),
    ("import math\nx = 0.5\nmath.acosh(x)", "issue 28",
     "ValueError: expected argument value not less than 1, got 0.5"),
    ("import math\nmath.asin(float('-inf'))", "test_math.py:289 testAsin",
     "ValueError: expected a number in range from -1 up to 1, got -inf"),
    ("import math\nmath.atanh(1)", "test_math.py:317 testAtanh",
     "ValueError: expected a number between -1 and 1, got 1.0"),
    ("import math\nmath.cos(float('inf'))", "test_math.py:484 testCos",
     "ValueError: expected a finite input, got inf"),
    ("import math\nmath.log(-1.5)", "test_math.py:1210 testLog",
     "ValueError: expected a positive input, got -1.5"),
    ("import math\nmath.log(-10**1000)", "test_math.py:1211 testLog",
     "ValueError: expected a positive input"),
    ("import math\nmath.log(10, -10)", "test_math.py:1212 testLog",
     "ValueError: expected a positive input"),
    ("import math\nmath.log1p(-1)", "test_math.py:1221 testLog1p",
     "ValueError: expected argument value > -1, got -1.0"),
    ("import math\nmath.log2(-1.5)", "test_math.py:1238 testLog2",
     "ValueError: expected a positive input, got -1.5"),
    ("import math\nmath.log10(-10**1000)", "test_math.py:1258 testLog10",
     "ValueError: expected a positive input"),
    ("import math\nmath.sin(float('inf'))", "test_math.py:1577 testSin",
     "ValueError: expected a finite input, got inf"),
    ("import math\nmath.sqrt(-1)", "test_math.py:1600 testSqrt",
     "ValueError: expected a nonnegative input, got -1.0"),
    ("import math\nmath.sqrt(-1e20)", "issue 28 (repr of the argument)",
     "ValueError: expected a nonnegative input, got -1e+20"),
    ("import math\nmath.tan(float('-inf'))", "test_math.py:1614 testTan",
     "ValueError: expected a finite input, got -inf"),
    ("import math\nmath.lgamma(-2)", "math_testcases.txt:182 lgam0011",
     "ValueError: expected a noninteger or positive integer, got -2.0"),
    ("import math\nmath.gamma(0)", "math_testcases.txt:279 gam0000",
     "ValueError: expected a noninteger or positive integer, got 0.0"),
    ("import math\nmath.pow(0., -2.)", "test_math.py:1305 testPow (3.14 keeps the words)", None),

    # Invalid format specifiers: Lib/test/test_format.py.
    ("format(12, '%M')", "test_format.py:537 test_better_error_message_format", None),
    ("format(12.0, '%M')", "test_format.py:537 test_better_error_message_format", None),
    ("format('12', '%M')", "test_format.py:537 test_better_error_message_format", None),
    ("format(12j, '%M')", "test_format.py:537 test_better_error_message_format", None),
    ("'xx{value:%M}yy'.format(value=12)", "test_format.py:533", None),
    ("'{a:%ЫйЯЧ}'.format(a='a')", "test_format.py:547 test_unicode_in_error_message", None),
    ("f'{0:z+f}'", "test_format.py:609 test_specifier_z_error", None),
    ("f'{0:fz}'", "test_format.py:611 test_specifier_z_error", None),
    ("format(1, 'xyz')", "issue 28", None),

    # Recursion: Lib/test/test_exceptions.py.
    ("def f():\n    return f()\nf()", "test_exceptions.py:685 testInfiniteRecursion", None),
    ("def g():\n    try:\n        return g()\n    except ValueError:\n        return -1\ng()",
     "test_exceptions.py:690 testInfiniteRecursion", None),
]


def python_error(code):
    """`Type: message` of the exception `code` leaves uncaught in this Python."""
    runner = ("import sys\ncode = sys.stdin.read()\ntry:\n"
              "    exec(compile(code, '<script>', 'exec'), {'__name__': '__main__'})\n"
              "except BaseException as e:\n    print(f'{type(e).__name__}: {e}', end='')\n")
    out = subprocess.run([sys.executable, "-c", runner], input=code, capture_output=True,
                         text=True, timeout=60)
    return out.stdout or "no error"


def paddock_errors(paddock, codes):
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, code in enumerate(codes):
            path = os.path.join(tmp, f"case{i:03}.py")
            with open(path, "w", encoding="utf-8") as f:
                f.write(code)
            paths.append(path)
        out = subprocess.run([paddock, "run", "--timeout", "20", *paths], capture_output=True,
                             text=True, timeout=600)
    results = [json.loads(line) for line in out.stdout.splitlines()]
    if len(results) != len(codes):
        sys.exit(f"paddock gave {len(results)} results for {len(codes)} scripts:\n{out.stderr}")
    errors = []
    for result in results:
        error = result.get("error") or "no error"
        if " (line " in error and error.endswith(")"):
            error = error[:error.rindex(" (line ")]
        errors.append(error)
    return errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paddock", default=os.path.join(ROOT, "target/release/paddock"))
    parser.add_argument("-v", "--verbose", action="store_true", help="print the matches too")
    args = parser.parse_args()
    got = paddock_errors(args.paddock, [code for code, _, _ in CASES])
    matched = 0
    for (code, source, wanted), paddock in zip(CASES, got):
        here = python_error(code)
        expected = wanted or here
        ok = paddock == expected
        matched += ok
        if args.verbose or not ok:
            print(f"{'ok  ' if ok else 'MISS'} {source}: {code!r}")
            print(f"       paddock: {paddock}")
            print(f"       CPython: {expected}" + (f"   (this Python: {here})" if wanted else ""))
    version = ".".join(map(str, sys.version_info[:3]))
    print(f"matched {matched}/{len(CASES)} (CPython 3.14's words; this Python is {version})")


if __name__ == "__main__":
    main()
