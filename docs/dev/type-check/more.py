import numpy
x = tools.everything.get_structured_content(location="Chicago")
x["temp"]
async def f():
    return tools.everything.get_sum(a=1, b="2")
tools.nope.x()
