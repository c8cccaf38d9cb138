-- The plugin's HTTP route and MCP tool read the outcomes through spectral's operator role
-- (the pool its surfaces act through); it may read them and nothing else of the plugin's.
GRANT USAGE ON SCHEMA deploys TO spectral_operator;
GRANT SELECT ON deploys.service_outcomes TO spectral_operator;
