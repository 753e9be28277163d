-- A function's triggers, found without reading every trigger of its namespace.
CREATE INDEX IF NOT EXISTS objects_trigger_function
    ON objects (namespace, json_extract(spec, '$.functionRef'))
    WHERE kind = 'Trigger';
