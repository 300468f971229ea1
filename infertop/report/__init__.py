"""Reports: the schema-1 JSON document and its text and markdown renderings."""
