"""OCaml, native code with the host's ocamlopt (the standard library only).

The program and its tests are two compilation units, not one file: the program becomes
``solution.ml`` and the tests ``main.ml``, linked after it. In one file a program could
undo the tests after it: ``let ( = ) _ _ = true``, its own ``module Stdlib`` opened, an
unclosed string or comment that swallows them. Apart, the program is lexed and typed on
its own, and the tests see its names only through a module of ours that first opens the
program (``open Solution``), then the real standard library again, under a name the
program cannot know (see ``_SCOPE``): ``=``, ``Stdlib``, ``List``... in the tests are
the standard library's, whatever the program defined.

The executor hands over one source file (the program, then the tests from the
``test_prelude`` line on); the compile step splits it at the last such line, which only
the tests can hold (the program comes first). A stdin/stdout program gets an empty
``main.ml``: all of it runs as ``solution.ml``'s initialisation.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from sandbox_workers.languages.base import (
    CompileStep,
    Language,
    Launch,
    Toolchain,
    byte_list,
    last_line_at,
    masked_marker,
    probe_version,
    read_only,
    resolve_binary,
    split_compile_script,
)
from sandbox_workers.languages.native import EXIT_CALLED_STATUS
from schemas import Limits

__all__ = ["OCaml"]

BINARY = "main"
SOURCE = "source.ml"
# Where the tests start: a whole line (a comment), the last such line of the source.
SPLIT = "(* rewardbus: the tests start here *)"
# Split the source into solution.ml and main.ml at the last SPLIT line ($1), then run
# ocamlopt ("$@"). A constant script; the source is only data to it.
_SPLIT_SCRIPT = split_compile_script(SOURCE, "solution.ml", "main.ml", "solution.ml", "main.ml")
# Stands for the secret part of our module names in the test code; prepare_source puts a
# hash of the whole source there (the program's text and the masked marker in it), so no
# program can define a module of that name: it would have to hold its own hash.
_SCOPE = "REWARDBUS_SCOPE"
_STDLIB = f"Rewardbus_stdlib_{_SCOPE}"
_SOLUTION = f"Rewardbus_solution_{_SCOPE}"
# MultiPL-E's `let candidate = <function> in`: the function under test, taken from the
# program by its path (a program's `max` is not shadowed by the reopened standard library).
_CANDIDATE = re.compile(
    r"\bcandidate(\s*=\s*)(?!(?:fun|function|let|match|if|begin)\b)([a-z_][\w']*)"
)
# Before the tests (module level of main.ml: the program's names are not in scope here).
# A failed assert is reported and ends the process here, with the program's at_exit and
# uncaught-exception handlers left out (either could turn it into an exit 0); so is any
# other exception. An exit while the tests run (Stdlib.exit, from the program or a signal
# handler of its) meets our at_exit handler, registered last and so run first: it says so
# and ends the process with EXIT_CALLED_STATUS. An exit that skips at_exit (the runtime's
# caml_sys_exit, libc's exit by an `external`) leaves the marker out.
# The line directive numbers the tests' lines from 1, as "tests.ml", in compiler errors
# and failed asserts.
_BEFORE_TESTS = f"""[@@@ocaml.warning "-a"]
module {_STDLIB} = Stdlib
module {_SOLUTION} = Solution
external rewardbus_sys_exit : int -> 'a = "caml_sys_exit"
let rewardbus_in_tests = ref false
let rewardbus_say text = try prerr_string text; flush stderr with _ -> ()
let rewardbus_fail status text =
  rewardbus_in_tests := false;
  rewardbus_say text;
  rewardbus_sys_exit status
let () =
  at_exit (fun () ->
    if !rewardbus_in_tests then
      rewardbus_fail {EXIT_CALLED_STATUS} "\\nexit called during the tests\\n")
let () =
  rewardbus_in_tests := true;
  try
    let module Rewardbus_tests = struct
      open Solution
      open {_STDLIB}
      module Stdlib = {_STDLIB}
# 1 "tests.ml"
"""
_AFTER_TESTS = """
    end in
    rewardbus_in_tests := false
  with
  | Assert_failure (file, line, column) ->
      rewardbus_fail 1 (Printf.sprintf "\\nAssertion failed: File %S, line %d, column %d\\n"
        file line column)
  | Out_of_memory -> rewardbus_fail 2 "\\nOut of memory (exception Out_of_memory)\\n"
  | error -> rewardbus_fail 2
      ("\\nFatal error: exception " ^ Printexc.to_string_default error ^ "\\n")
"""
# Printed from its mask and key once the tests returned; the key is an array (mutable),
# so the compiler cannot fold the two into the marker as text in the binary.
_MARKER = """
let () =
  let masked = [| {masked} |] and key = [| {key} |] in
  rewardbus_say (String.init (Array.length masked) (fun i -> Char.chr (masked.(i) lxor key.(i))))
"""


def split_point(source: str) -> int | None:
    """Offset of the last SPLIT line in ``source`` (where the tests start), or None."""
    return last_line_at(source, SPLIT)


def _ocaml_array(data: bytes) -> str:
    """The elements of an OCaml int array literal (``;``-separated)."""
    return byte_list(data).replace(",", "; ")


class OCaml(Language):
    """OCaml: ocamlopt (native code; two compilation units, the program's and the tests')."""

    name = "ocaml"
    aliases = frozenset({"ocaml", "ml"})
    fence_tags = frozenset({"ocaml", "ml"})
    extension = "ml"
    test_prelude = f"{SPLIT}\n"

    def discover(self, state_dir: Path, fetched: Path) -> Toolchain | None:
        del state_dir, fetched
        ocamlopt = resolve_binary("ocamlopt")
        awk = resolve_binary("awk")
        shell = resolve_binary("sh")
        if ocamlopt is None or awk is None or shell is None:
            return None
        version = probe_version([str(ocamlopt), "-version"], prefix="ocaml-")
        if version is None:
            return None
        # The standard library, the runtime, gcc, as and ld are all under /usr.
        return Toolchain(
            language=self.name,
            version=version,
            paths={"ocamlopt": str(ocamlopt), "sh": str(shell)},
            mounts=read_only(awk),
        )

    def prepare_source(self, source: str) -> str:
        split = split_point(source)
        if split is None:
            return f"{source}\n{SPLIT}\n"
        scope = hashlib.sha256(source.encode("utf-8", errors="surrogatepass")).hexdigest()[:24]
        return source[:split] + source[split:].replace(_SCOPE, scope)

    def source_name(self, source: str) -> str:
        del source
        return SOURCE

    def mark_tests_end(self, tests: str, marker: str) -> str | None:
        body = tests.removeprefix(self.test_prelude)
        if body == tests:
            return None
        masked, key = masked_marker(marker)
        body = _CANDIDATE.sub(lambda m: f"candidate{m.group(1)}{_SOLUTION}.{m.group(2)}", body)
        marker_code = _MARKER.format(masked=_ocaml_array(masked), key=_ocaml_array(key))
        return f"{self.test_prelude}{_BEFORE_TESTS}{body}{_AFTER_TESTS}{marker_code}"

    def compile_step(self, toolchain: Toolchain, source_name: str) -> CompileStep:
        del source_name
        return CompileStep(
            argv=(
                toolchain.paths["sh"],
                "-c",
                _SPLIT_SCRIPT,
                "sh",
                SPLIT,
                toolchain.paths["ocamlopt"],
                "-o",
                BINARY,
            ),
            entry=BINARY,
            collect=(BINARY,),
            executables=frozenset({BINARY}),
        )

    def launch(self, toolchain: Toolchain, entry: str, limits: Limits) -> Launch:
        del toolchain, limits
        return Launch(argv=(f"./{entry}",))
