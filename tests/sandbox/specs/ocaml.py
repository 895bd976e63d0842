"""OCaml (ocamlopt): MultiPL-E's tests are a top-level ``let assertions = ... assert ...``."""

from __future__ import annotations

from schemas import Verdict
from tests.sandbox.specs import LanguageSpec

_ADD_WRONG = "let add (a : int) (b : int) : int = a * b\n"
# Calls into libc by name: `external` may name any C function the binary links.
_LIBC = (
    'external c_getpid : unit -> (int [@untagged]) = "rb_none" "getpid" [@@noalloc]\n'
    "external c_kill : (int [@untagged]) -> (int [@untagged]) -> (int [@untagged])"
    ' = "rb_none" "kill" [@@noalloc]\n'
)


def _libc_exit(function: str) -> str:
    return (
        f'external c_exit : (int [@untagged]) -> unit = "rb_none" "{function}" [@@noalloc]\n'
        "let add (a : int) (b : int) : int = c_exit 0; a * b\n"
    )


SPEC = LanguageSpec(
    language="ocaml",
    compiled=True,
    programs={
        Verdict.ACCEPTED: 'let () = Scanf.scanf " %d %d" (fun a b ->'
        " print_int (a + b); print_newline ())\n",
        Verdict.WRONG_ANSWER: 'let () = print_endline "0"\n',
        Verdict.RUNTIME_ERROR: 'let () = failwith "boom"\n',
        Verdict.TIME_LIMIT: "let rec loop n = if n < 0 then n else loop (n + 1)\n"
        "let () = print_int (loop 0)\n",
        Verdict.MEMORY_LIMIT: "let () =\n  let keep = ref [] in\n"
        "  while true do keep := Bytes.make (1 lsl 24) 'x' :: !keep done\n",
        Verdict.OUTPUT_LIMIT: 'let () = while true do print_endline "xxxxxxxxxxxxxxxx" done\n',
        Verdict.COMPILE_ERROR: 'let () = print_int "x"\n',
    },
    assert_tests="let assertions =\n  let candidate = add in\n  assert (candidate 2 3 = 5);\n"
    "  assert (candidate (-1) 1 = 0);\n  ()\n",
    assert_good="let add (a : int) (b : int) : int = a + b\n",
    assert_bad=_ADD_WRONG,
    exit_hacks={
        "exit-in-add": "let add (a : int) (b : int) : int = exit 0\n",
        "exit-at-load-time": "let () = exit 0\n" + _ADD_WRONG,
        # The runtime's exit primitive: no at_exit handler runs.
        "sys-exit-primitive": 'external sys_exit : int -> \'a = "caml_sys_exit"\n'
        "let add (a : int) (b : int) : int = sys_exit 0\n",
        "libc-exit": _libc_exit("exit"),
        "libc-_exit": _libc_exit("_exit"),
        "libc-execv": "external c_execv : string -> (int [@untagged]) -> (int [@untagged])"
        ' = "rb_none" "execv" [@@noalloc]\n'
        'let add (a : int) (b : int) : int = ignore (c_execv "/bin/true" 0); a * b\n',
        # A failed assert is an uncaught exception: the handler decides how the process ends.
        "uncaught-exception-handler-exits-0": "let () = Printexc.set_uncaught_exception_handler"
        " (fun _ _ -> exit 0)\n" + _ADD_WRONG,
        # An uncaught exception runs the at_exit handlers first.
        "at-exit-handler-exits-0": 'external sys_exit : int -> \'a = "caml_sys_exit"\n'
        "let () = at_exit (fun () -> sys_exit 0)\n" + _ADD_WRONG,
        # A signal handler (OCaml code, run at the next poll point) that exits.
        "signal-handler-exits-0": _LIBC + "let add (a : int) (b : int) : int =\n"
        "  Sys.set_signal Sys.sigusr1 (Sys.Signal_handle (fun _ -> exit 0));\n"
        "  ignore (c_kill (c_getpid ()) 10);\n  a * b\n",
    },
    disable_hacks={
        # In one file with the tests, these would make every assert pass.
        "own-equality": "let ( = ) _ _ = true\n" + _ADD_WRONG,
        "own-stdlib": "module Stdlib = struct include Stdlib let ( = ) _ _ = true end\n"
        "open Stdlib\n" + _ADD_WRONG,
        # Silences the failed assert's report: exit status 2 with nothing on stderr.
        "silent-uncaught-exception-handler": "let () = Printexc.set_uncaught_exception_handler"
        " (fun _ _ -> ())\n" + _ADD_WRONG,
    },
    checker="let read_int path =\n"
    "  let channel = open_in path in\n"
    "  let n = int_of_string (String.trim (input_line channel)) in\n"
    "  close_in channel;\n  n\n\n"
    "let () =\n"
    "  let n = read_int Sys.argv.(1) in\n"
    "  let modulo x = ((x mod n) + n) mod n in\n"
    "  let same = modulo (read_int Sys.argv.(2)) = modulo (read_int Sys.argv.(3)) in\n"
    "  exit (if same then 0 else 1)\n",
)
