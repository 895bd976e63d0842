"""Haskell (GHC): MultiPL-E's tests are a ``main`` of ``if ... then pure () else error``."""

from __future__ import annotations

from schemas import Verdict
from tests.sandbox.specs import LanguageSpec

_ADD_WRONG = "add :: Int -> Int -> Int\nadd a b = a * b\n"

SPEC = LanguageSpec(
    language="haskell",
    compiled=True,
    programs={
        Verdict.ACCEPTED: "main :: IO ()\n"
        "main = do\n  [a, b] <- map read . words <$> getLine\n  print (a + b :: Integer)\n",
        Verdict.WRONG_ANSWER: "main :: IO ()\nmain = print (0 :: Int)\n",
        Verdict.RUNTIME_ERROR: 'main :: IO ()\nmain = error "boom"\n',
        Verdict.TIME_LIMIT: "loop :: Int -> Int\nloop n = if n < 0 then n else loop (n + 1)\n"
        "main :: IO ()\nmain = print (loop 0)\n",
        # The whole list stays alive (sum after length): the heap grows until +RTS -M.
        Verdict.MEMORY_LIMIT: "main :: IO ()\n"
        "main = do\n  let xs = [1 ..] :: [Integer]\n  print (length xs, sum xs)\n",
        Verdict.OUTPUT_LIMIT: 'main :: IO ()\nmain = mapM_ putStrLn (repeat "xxxxxxxxxxxxxxxx")\n',
        Verdict.COMPILE_ERROR: "main :: IO ()\nmain = putStrLn (1 + True)\n",
    },
    assert_tests="main :: IO ()\nmain = do\n  let candidate = add\n"
    '  if candidate 2 3 == 5 then pure () else error "This is a test failure"\n'
    '  if candidate (-1) 1 == 0 then pure () else error "This is a test failure"\n',
    assert_good="add :: Int -> Int -> Int\nadd a b = a + b\n",
    assert_bad=_ADD_WRONG,
    exit_hacks={
        # A pure function throws ExitSuccess: GHC's top handler exits 0 with it.
        "throw-exit-success": "import Control.Exception (throw)\n"
        "import System.Exit (ExitCode (ExitSuccess))\n"
        "add :: Int -> Int -> Int\nadd _ _ = throw ExitSuccess\n",
        # The same from a top-level value (no load time in Haskell: when first used).
        "exit-success-caf": "import Control.Exception (throw)\nimport System.Exit\n"
        "add :: Int -> Int -> Int\nadd = throw ExitSuccess\n",
        "unsafe-perform-exit": "import System.IO.Unsafe (unsafePerformIO)\nimport System.Exit\n"
        "add :: Int -> Int -> Int\nadd _ _ = unsafePerformIO exitSuccess\n",
        "posix-exit-immediately": "{-# LANGUAGE Trustworthy #-}\n"
        "import System.IO.Unsafe (unsafePerformIO)\n"
        "import System.Posix.Process (exitImmediately)\nimport System.Exit\n"
        "add :: Int -> Int -> Int\n"
        "add a b = unsafePerformIO (exitImmediately ExitSuccess) `seq` a * b\n",
        "options-trustworthy": "{-# OPTIONS_GHC -XTrustworthy #-}\n"
        "import System.IO.Unsafe (unsafePerformIO)\nimport System.Exit\n"
        "add :: Int -> Int -> Int\nadd _ _ = unsafePerformIO exitSuccess\n",
        # Code at compile time: rewrite the tests before GHC reads them.
        "template-haskell-rewrites-tests": "{-# LANGUAGE TemplateHaskell #-}\n"
        "import Language.Haskell.TH\n"
        'add :: Int -> Int -> Int\nadd a b = a * b\n$(runIO (writeFile "Main.hs"'
        ' "module Main where\\nmain = pure ()\\n") >> pure [])\n',
        # A preprocessor of the program's choosing: GHC runs `/bin/sh Solution.hs in out`,
        # and the shell runs what the block comment holds (rewriting the tests; effective
        # when GHC reads Main.hs after preprocessing Solution.hs, as with the files in the
        # other order on its command line).
        "options-preprocessor": "{-# OPTIONS_GHC -F -pgmF /bin/sh #-}\n{-\n"
        "printf 'module Main where\\nmain = pure ()\\n' > Main.hs\n"
        'cp "$1" "$2"\nexit 0\n-}\n' + _ADD_WRONG,
    },
    disable_hacks={
        # In one module with the tests, these would make every check pass.
        "own-equality": "import Prelude hiding ((==))\n(==) :: a -> a -> Bool\n_ == _ = True\n"
        + _ADD_WRONG,
        "own-error": "import Prelude hiding (error)\n"
        "error :: Applicative f => String -> f ()\nerror _ = pure ()\n" + _ADD_WRONG,
        "cpp-defines-error": "{-# LANGUAGE CPP #-}\n#define error const (pure ())\n" + _ADD_WRONG,
        "rebindable-if": "{-# LANGUAGE RebindableSyntax #-}\nimport Prelude\n"
        "ifThenElse :: Bool -> a -> a -> a\nifThenElse _ t _ = t\n" + _ADD_WRONG,
        "own-main-module": "module Main (main, add) where\nmain :: IO ()\nmain = pure ()\n"
        + _ADD_WRONG,
    },
    checker="import System.Environment (getArgs)\nimport System.Exit\n"
    "main :: IO ()\nmain = do\n  [input, output, answer] <- getArgs\n"
    "  n <- read <$> readFile input\n  got <- read <$> readFile output\n"
    "  want <- read <$> readFile answer\n"
    "  if (got :: Integer) `mod` n == want `mod` n then pure () else exitWith (ExitFailure 1)\n",
)
