"""The MCP server's shared parts (on the official ``mcp`` SDK): token verification for the
streamable HTTP transport, the calling principal and its scopes in a tool, and errors a model
can act on. Tools live beside their domains and are composed in spectral/cli/mcp.py."""
