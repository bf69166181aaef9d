"""SGLang's launch flags per version: an AST reader of its source and the tables shipped from it."""
