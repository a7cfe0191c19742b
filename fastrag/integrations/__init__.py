"""fastrag from other frameworks: retrievers for LlamaIndex and LangChain, an MCP server for
agents. Each module imports its framework (an optional extra) when it is imported itself;
this package imports nothing.

* :mod:`fastrag.integrations.llama_index`: ``FastragRetriever``, a LlamaIndex ``BaseRetriever``
  (the ``[llama-index]`` extra).
* :mod:`fastrag.integrations.langchain`: ``FastragRetriever``, a LangChain ``BaseRetriever``
  whose ``batch`` is one fastrag batch call (the ``[langchain]`` extra).
* :mod:`fastrag.integrations.mcp_server`: ``run_mcp(store, ...)``, the tools ``search``, ``ask``
  and ``list_groups`` and the documents as resources, over stdio or streamable HTTP (the
  ``[mcp]`` extra; ``fastrag mcp STORE``).
"""
