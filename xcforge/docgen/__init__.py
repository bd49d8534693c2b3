"""Generated sections of hand-written docs, drift-checked by `render --check`: README's target list
and table (readme_table.py) and docs/engine.md's backend table (doc_tables.py). Beside the flow: no
stage reads them."""
