B
sum_squareJòyA