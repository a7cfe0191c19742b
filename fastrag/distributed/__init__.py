"""Work beyond one process or machine: sharded indexes and Ray Data jobs (see
:mod:`fastrag.ray`, the public module)."""
