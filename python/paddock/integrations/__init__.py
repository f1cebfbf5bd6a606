"""Framework integrations (DESIGN.md section 9).

Each lives in a module of its own, named after its framework, and imports that framework only
when the module itself is imported, so `import paddock` never needs one; each has the package
extra of its framework's name (`pip install "paddock[pydantic-ai]"`). For example
`paddock.integrations.pydantic_ai.PaddockWorkspace` is a pydantic-ai workspace backend on a
Paddock session.
"""
