"""Where tools come from: YAML tool files, OpenAPI documents (by file or URL) and MCP
servers. Each source gives the registry ``Tool``s; none of it is trusted."""
