"""Loaded by every pytest run in this repository, before any test or chapter runs.

nbval compares each chapter's stored outputs with a fresh run in a kernel that inherits
this environment. Chapters that time the reader's machine (chapters 5 and 7) print the
times measured on the book's build machine when ``BOOK_STORED_OUTPUTS=1``, as they did
when ``scripts/execute_chapters.py`` stored them: a measured time can never equal a
stored one.
"""
import os

os.environ["BOOK_STORED_OUTPUTS"] = "1"
