@_exported import LumenImaging
