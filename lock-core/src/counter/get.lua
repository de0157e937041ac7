-- Returns the available stock, or -1 for an unknown item.
return available() or -1
