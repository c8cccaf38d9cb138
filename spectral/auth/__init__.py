"""Who may call the network surfaces: API tokens with scopes (hashed at rest) and the principal
a verified token stands for. Used by the HTTP API, the web console and the MCP server alike."""
