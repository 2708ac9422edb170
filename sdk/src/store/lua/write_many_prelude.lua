local n, skip = #KEYS, {}
