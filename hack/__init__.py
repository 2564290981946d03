"""The developer scripts the Makefile runs. A package so that tests can import what a script
defines (tests/unit/harness/test_mutations.py reads `hack.mutations.MUTATIONS`)."""
